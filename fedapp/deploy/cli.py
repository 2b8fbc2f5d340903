"""`fedapp deploy ...`: certificates, node keys, connection, registration, and the
SuperLink / SuperNode processes (docs/deploy.md walks through them in order)."""

from __future__ import annotations

import argparse
import shlex
import shutil
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
    """``PARTITION=KEY.pub`` binds the key to that partition (its registered name, fedapp.server.node_binding).
    Idempotent: a key the SuperLink already holds counts as registered (compose re-runs this)."""
    from fedapp.deploy.commands import register_argv, registration

    keys = [registration(arg) for arg in args.public_keys]  # every argument checked before any is registered
    for pub, name in keys:
        proc = subprocess.run(register_argv(pub, args.connection, name), capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        if proc.returncode != 0 and "already in use" not in out:
            print(out, end="", file=sys.stderr)
            return proc.returncode
        kept = f"{pub}: already registered (under the name it was registered with)"
        print(f"{out.strip()} (name {name})" if proc.returncode == 0 else kept)
    return 0


def _run(argvs: list[list[str]], args: argparse.Namespace, conf: str = "", respawn: list[list[str]] | None = None) -> int:
    """Run the commands as one supervised group, ``respawn``'s beside it restarted alone
    (``--dry-run``: print them, and nginx.conf)."""
    if args.dry_run:
        for argv in [*argvs, *(respawn or [])]:
            print(shlex.join(argv))
        print(conf, end="")
        return 0
    from fedapp.deploy.supervise import supervise_group

    return supervise_group(argvs, -1.0 if args.no_restart else args.restart_delay, respawn)


def _with_proxy(argvs: list[list[str]], args: argparse.Namespace, upstream: str, respawn: list[list[str]] | None = None) -> int:
    """Add nginx on ``--host:--port`` in front of ``upstream`` to the group, in a private folder."""
    import tempfile

    from fedapp.deploy.proxy import nginx_conf, proxy_argv, write_conf

    work = Path(args.proxy_dir) if args.proxy_dir else Path(tempfile.mkdtemp(prefix="fedapp-proxy-"))
    try:
        conf = nginx_conf(host=args.host, port=args.port, upstream=upstream, tls_dir=args.tls, workdir=work)
        argv = proxy_argv(work)
    except BaseException:
        if not args.proxy_dir:
            work.rmdir()
        raise
    if args.dry_run:
        if not args.proxy_dir:
            work.rmdir()
        return _run([*argvs, argv], args, conf, respawn)
    write_conf(work, conf)
    print(f"fedapp deploy: devices dial {args.host}:{args.port} (nginx: the Fleet API only, conf in {work}); ", end="", file=sys.stderr)
    print(f"the SuperLink itself is on {upstream} (the operator's Control API)", file=sys.stderr, flush=True)
    try:
        return _run([*argvs, argv], args, respawn=respawn)
    finally:
        if not args.proxy_dir:
            shutil.rmtree(work, ignore_errors=True)


def cmd_superlink(args: argparse.Namespace) -> int:
    """Secure shape: flower-superlink on loopback (``--control-host/--control-port``) and nginx on
    ``--host/--port`` forwarding the Fleet API only. ``--insecure``: flower-superlink alone on
    ``--host/--port``, plain HTTP, everything open (a closed test network)."""
    from fedapp.deploy.commands import superexec_argv, superlink_argv
    from fedapp.deploy.proxy import upstream_of

    if args.tls is None and not args.insecure:
        raise DeployError("give --tls DIR (from `fedapp deploy certs`), or --insecure for plain HTTP without node authentication")
    if args.insecure:
        link = superlink_argv(database=args.database, tls_dir=None, host=args.host, port=args.port, auth=not args.no_auth)
        return _run([link], args, respawn=[superexec_argv(host=_dial(args.host), port=args.port, tls_dir=None)])
    link = superlink_argv(database=args.database, tls_dir=args.tls, host=args.control_host, port=args.control_port, auth=not args.no_auth)
    execs = [superexec_argv(host=_dial(args.control_host), port=args.control_port, tls_dir=args.tls)]
    if args.no_proxy:
        return _run([link], args, respawn=execs)
    if args.port == args.control_port:
        raise DeployError(f"--port {args.port} (devices, through the proxy) and --control-port (the SuperLink itself) must differ")
    return _with_proxy([link], args, upstream_of(args.control_host, args.control_port), execs)


def _dial(host: str) -> str:
    """The address a process on this machine dials for a server bound to ``host`` (a wildcard: loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def cmd_proxy(args: argparse.Namespace) -> int:
    return _with_proxy([], args, args.upstream)


def cmd_supernode(args: argparse.Namespace) -> int:
    from fedapp.deploy.commands import supernode_argv, warm_runtime_argv

    if args.insecure:
        if args.ca is not None or args.key is not None:
            raise DeployError("--insecure is plain HTTP without node authentication: drop --ca and --key, or drop --insecure")
        ca, key = None, None
    elif args.ca is None:
        raise DeployError("give --ca CA.crt and --key KEY (TLS and node authentication), or --insecure for plain HTTP")
    else:
        ca, key = args.ca, args.key
    node = {
        "partition-id": args.partition_id, "num-partitions": args.num_partitions, "data-root": args.data_root,
        "state-dir": str(Path(args.state_dir).resolve()), "tier": args.tier, "active-fraction": args.active_fraction,
        "device-name": args.device_name,
        "device": args.device,
        "energy-sysfs-root": args.energy_sysfs_root, "energy-tegrastats": args.energy_tegrastats,
    }  # fmt: skip
    argv = supernode_argv(superlink=args.superlink, node_config=node, ca=ca, key=key, port=args.port, runtime=args.runtime)
    if args.runtime_poll_interval is not None and args.runtime != "warm":
        raise DeployError("--runtime-poll-interval is the warm runtime's: drop it, or use --runtime warm")
    respawn = [warm_runtime_argv(args.port, args.runtime_poll_interval)] if args.runtime == "warm" else None
    return _run([argv], args, respawn=respawn)


def _process_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--restart-delay", type=float, default=10.0, help="seconds before restarting the process after it exits (default 10)")
    p.add_argument("--no-restart", action="store_true", help="run once (under systemd/compose, which restart it themselves)")
    p.add_argument("--dry-run", action="store_true", help="print the command line instead of running it")


def _proxy_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address the devices dial (default 127.0.0.1: this machine only; 0.0.0.0: all)")
    p.add_argument("--port", type=int, default=8000, help="port the devices dial (default 8000)")
    p.add_argument("--proxy-dir", help="folder for nginx.conf and nginx's files (default: a fresh temporary folder, removed at exit)")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    d = sub.add_parser("deploy", help="real deployment: TLS material, node keys, SuperLink and SuperNode processes")
    dsub = d.add_subparsers(dest="deploy_cmd", required=True)

    p = dsub.add_parser("certs", help="private CA + SuperLink certificate for the addresses nodes dial")
    p.add_argument("--address", action="append", required=True, help="IP or DNS name of the SuperLink (repeat for several)")
    p.add_argument("--out", required=True, help="folder for ca.crt, ca.key, server.pem, server.key (an existing CA is reused)")
    p.set_defaults(fn=cmd_certs)

    p = dsub.add_parser("keys", help="SuperNode authentication keys (EC P-256, OpenSSH format)")
    p.add_argument("--nodes", type=int, required=True, help="how many SuperNodes: one key pair each, numbered 0..N-1")
    p.add_argument("--out", required=True, help="folder for the key pairs (existing pairs are kept, not replaced)")
    p.add_argument("--prefix", default="supernode", help="file name before -<i>: <out>/<prefix>-<i> and .pub (default supernode)")
    p.set_defaults(fn=cmd_keys)

    p = dsub.add_parser("connection", help="add a SuperLink connection to $FLWR_HOME/config.toml for `flwr run . NAME`")
    p.add_argument("--name", required=True, help="connection name, as in `flwr run . NAME`")
    p.add_argument("--address", required=True, help="HOST:PORT of the SuperLink itself: 127.0.0.1:9093 on its host or through `ssh -L`")
    p.add_argument("--ca", help="CA certificate (ca.crt) that signed the SuperLink's certificate")
    p.add_argument("--insecure", action="store_true", help="plain HTTP (only for a SuperLink started with --insecure)")
    p.add_argument("--flwr-home", help="default: $FLWR_HOME or ~/.flwr")
    p.add_argument("--default", action="store_true", help="make it what a plain `flwr run .` dials (else the default stays)")
    p.set_defaults(fn=cmd_connection)

    p = dsub.add_parser("register", help="register SuperNode public keys with the SuperLink (flwr supernode register)")
    p.add_argument("--connection", required=True, help="connection name from `fedapp deploy connection` (the SuperLink to register with)")
    p.add_argument(
        "public_keys", nargs="+", metavar="[PARTITION=]KEY.pub",
        help="a node's public key; PARTITION= binds it to that partition: the node may serve no other (docs/deploy.md)",
    )  # fmt: skip
    p.set_defaults(fn=cmd_register)

    p = dsub.add_parser("superlink", help="run flower-superlink on loopback (HTTPS, node authentication, state database) behind the proxy")
    p.add_argument("--tls", help="folder from `fedapp deploy certs`")
    p.add_argument("--database", default="state.db", help="SQLite state database (SuperNodes survive a SuperLink restart)")
    _proxy_flags(p)
    p.add_argument(
        "--control-host",
        default="127.0.0.1",
        help="where flower-superlink itself listens (default 127.0.0.1): the operator's Control API, the ServerApp's Runtime API, "
        "the proxy's upstream; whoever reaches it controls the deployment",
    )
    p.add_argument("--control-port", type=int, default=9093, help="flower-superlink's own port (default 9093)")
    p.add_argument("--no-proxy", action="store_true", help="start flower-superlink alone (the proxy runs apart: `fedapp deploy proxy`)")
    p.add_argument("--no-auth", action="store_true", help="admit any SuperNode (TLS still on)")
    _process_flags(p)
    p.add_argument("--insecure", action="store_true", help="plain HTTP, no proxy, no node authentication, every API on --host/--port")
    p.set_defaults(fn=cmd_superlink)

    p = dsub.add_parser("proxy", help="run the TLS proxy alone: the Fleet API of a SuperLink at --upstream, nothing else")
    p.add_argument("--tls", required=True, help="folder from `fedapp deploy certs` (server.pem, server.key, ca.crt)")
    p.add_argument("--upstream", default="127.0.0.1:9093", help="HOST:PORT of flower-superlink (default 127.0.0.1:9093)")
    _proxy_flags(p)
    _process_flags(p)
    p.set_defaults(fn=cmd_proxy)

    p = dsub.add_parser("supernode", help="run flower-supernode with this project's node config")
    p.add_argument("--superlink", required=True, help="HOST:PORT the devices dial (the proxy: `fedapp deploy superlink --host/--port`)")
    p.add_argument("--ca", help="CA certificate (ca.crt)")
    p.add_argument("--key", help="this node's private key (from `fedapp deploy keys`, registered)")
    p.add_argument("--partition-id", type=int, required=True, help="this node's partition of the data: 0..num-partitions-1")
    p.add_argument("--num-partitions", type=int, required=True, help="partitions in the federation (the run's num-clients)")
    p.add_argument("--state-dir", required=True, help="where client state persists (masks, personal parameters, flags)")
    p.add_argument("--data-root", default=None, help="dataset folder on this device (overrides the run-config's data-root)")
    p.add_argument("--tier", default=None, help="device tier reported to the server (e.g. low, mid, high)")
    p.add_argument(
        "--active-fraction", type=float, default=None, help="this node's share of neurons for FedSPU/FjORD/FedDrop (wins over --tier)"
    )
    p.add_argument("--device-name", default=socket.gethostname(), help="name reported to the server (default: this host's name)")
    p.add_argument("--device", default=None, help="torch device to train on (auto, cpu, cuda, cuda:N, mps); wins over the run-config")
    p.add_argument("--energy-sysfs-root", help="sysfs root the jetson and rapl meters read (default /sys; a host /sys in a container)")
    p.add_argument("--energy-tegrastats", help="tegrastats command (--interval is appended) or a --logfile to follow (default tegrastats)")
    p.add_argument("--port", type=int, default=9094, help="local runtime API port; unique per SuperNode on one host")
    p.add_argument(
        "--runtime", choices=("warm", "flower"), default="warm",
        help="warm (default): each message in a process forked from one that keeps Python, torch and the app loaded; "
        "flower: Flower's fresh flwr-clientapp process per message (docs/deploy.md, 'Warm runtime')",
    )  # fmt: skip
    p.add_argument(
        "--runtime-poll-interval", type=float, default=None, metavar="SECONDS",
        help="how often the warm runtime asks the SuperNode for a task (default 1, as Flower's runtime)",
    )  # fmt: skip
    _process_flags(p)
    p.add_argument("--insecure", action="store_true", help="plain HTTP, no node authentication (no --ca, no --key): closed test networks")
    p.set_defaults(fn=cmd_supernode)
