"""`fedapp deploy ...`: certificates, node keys, connection, registration, and the
SuperLink / SuperNode processes (docs/deploy.md walks through them in order)."""

from __future__ import annotations

import argparse
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from fedapp.deploy import DeployError


def cmd_certs(args: argparse.Namespace) -> int:
    from fedapp.deploy.certs import make_certs

    files = make_certs(args.address, args.out)
    print(f"CA (give to every SuperNode and flwr CLI): {files.ca_cert}\nCA key (keep offline): {files.ca_key}")
    print(f"SuperLink certificate for {', '.join(args.address)}: {files.server_cert}\nSuperLink key: {files.server_key}")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from fedapp.deploy.keys import make_node_keys

    for priv, pub in make_node_keys(args.nodes, args.out, args.prefix):
        print(f"{priv}  (copy to the node)   {pub}  (register: fedapp deploy register --connection NAME {pub})")
    return 0


def cmd_connection(args: argparse.Namespace) -> int:
    from fedapp.deploy.connection import write_connection

    if args.ca is None and not args.insecure:
        raise DeployError("give --ca CA.crt (TLS), or --insecure for a plain-HTTP SuperLink")
    path = write_connection(args.name, args.address, None if args.insecure else args.ca, args.flwr_home, args.default)
    print(f"connection '{args.name}' -> {args.address} written to {path}; run: flwr run . {args.name} --stream")
    return 0


def cmd_register(args: argparse.Namespace) -> int:
    """Idempotent: a key the SuperLink already holds counts as registered (compose re-runs this)."""
    from fedapp.deploy.commands import register_argv

    for pub in args.public_keys:
        proc = subprocess.run(register_argv(pub, args.connection, Path(pub).name.removesuffix(".pub")), capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        if proc.returncode != 0 and "already in use" not in out:
            print(out, end="", file=sys.stderr)
            return proc.returncode
        print(out.strip() if proc.returncode == 0 else f"{pub}: already registered")
    return 0


def _run(argv: list[str], args: argparse.Namespace) -> int:
    if args.dry_run:
        print(shlex.join(argv))
        return 0
    from fedapp.deploy.supervise import supervise

    return supervise(argv, -1.0 if args.no_restart else args.restart_delay)


def cmd_superlink(args: argparse.Namespace) -> int:
    from fedapp.deploy.commands import superlink_argv

    if args.tls is None and not args.insecure:
        raise DeployError("give --tls DIR (from `fedapp deploy certs`), or --insecure for plain HTTP without node authentication")
    tls = None if args.insecure else args.tls
    return _run(superlink_argv(database=args.database, tls_dir=tls, host=args.host, port=args.port, auth=not args.no_auth), args)


def cmd_supernode(args: argparse.Namespace) -> int:
    from fedapp.deploy.commands import supernode_argv

    if args.insecure:
        ca, key = None, None
    elif args.ca is None:
        raise DeployError("give --ca CA.crt and --key KEY (TLS and node authentication), or --insecure for plain HTTP")
    else:
        ca, key = args.ca, args.key
    node = {
        "partition-id": args.partition_id, "num-partitions": args.num_partitions, "data-root": args.data_root,
        "state-dir": str(Path(args.state_dir).resolve()), "tier": args.tier, "device-name": args.device_name,
        "device": args.device,
    }  # fmt: skip
    return _run(supernode_argv(superlink=args.superlink, node_config=node, ca=ca, key=key, port=args.port), args)


def _process_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--restart-delay", type=float, default=10.0, help="seconds before restarting the process after it exits (default 10)")
    p.add_argument("--no-restart", action="store_true", help="run once (under systemd/compose, which restart it themselves)")
    p.add_argument("--dry-run", action="store_true", help="print the command line instead of running it")
    p.add_argument("--insecure", action="store_true", help="plain HTTP, no node authentication: for a closed test network only")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    d = sub.add_parser("deploy", help="real deployment: TLS material, node keys, SuperLink and SuperNode processes")
    dsub = d.add_subparsers(dest="deploy_cmd", required=True)

    p = dsub.add_parser("certs", help="private CA + SuperLink certificate for the addresses nodes dial")
    p.add_argument("--address", action="append", required=True, help="IP or DNS name of the SuperLink (repeat for several)")
    p.add_argument("--out", required=True, help="folder for ca.crt, ca.key, server.pem, server.key (an existing CA is reused)")
    p.set_defaults(fn=cmd_certs)

    p = dsub.add_parser("keys", help="SuperNode authentication keys (EC P-256, OpenSSH format)")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--prefix", default="supernode")
    p.set_defaults(fn=cmd_keys)

    p = dsub.add_parser("connection", help="add a SuperLink connection to $FLWR_HOME/config.toml for `flwr run . NAME`")
    p.add_argument("--name", required=True)
    p.add_argument("--address", required=True, help="HOST:PORT of the SuperLink")
    p.add_argument("--ca", help="CA certificate (ca.crt) that signed the SuperLink's certificate")
    p.add_argument("--insecure", action="store_true", help="plain HTTP (only for a SuperLink started with --insecure)")
    p.add_argument("--flwr-home", help="default: $FLWR_HOME or ~/.flwr")
    p.add_argument("--default", action="store_true", help="make it the default connection")
    p.set_defaults(fn=cmd_connection)

    p = dsub.add_parser("register", help="register SuperNode public keys with the SuperLink (flwr supernode register)")
    p.add_argument("--connection", required=True)
    p.add_argument("public_keys", nargs="+")
    p.set_defaults(fn=cmd_register)

    p = dsub.add_parser("superlink", help="run flower-superlink: HTTPS, node authentication, state database")
    p.add_argument("--tls", help="folder from `fedapp deploy certs`")
    p.add_argument("--database", default="state.db", help="SQLite state database (SuperNodes survive a SuperLink restart)")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-auth", action="store_true", help="admit any SuperNode (TLS still on)")
    _process_flags(p)
    p.set_defaults(fn=cmd_superlink)

    p = dsub.add_parser("supernode", help="run flower-supernode with this project's node config")
    p.add_argument("--superlink", required=True, help="HOST:PORT of the SuperLink")
    p.add_argument("--ca", help="CA certificate (ca.crt)")
    p.add_argument("--key", help="this node's private key (from `fedapp deploy keys`, registered)")
    p.add_argument("--partition-id", type=int, required=True)
    p.add_argument("--num-partitions", type=int, required=True)
    p.add_argument("--state-dir", required=True, help="where client state persists (masks, personal parameters, flags)")
    p.add_argument("--data-root", default=None, help="dataset folder on this device (overrides the run-config's data-root)")
    p.add_argument("--tier", default=None, help="device tier reported to the server (e.g. low, mid, high)")
    p.add_argument("--device-name", default=socket.gethostname())
    p.add_argument("--device", default=None, help="torch device to train on (auto, cpu, cuda, cuda:N, mps); wins over the run-config")
    p.add_argument("--port", type=int, default=9094, help="local runtime API port; unique per SuperNode on one host")
    _process_flags(p)
    p.set_defaults(fn=cmd_supernode)
