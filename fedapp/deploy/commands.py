"""Command lines for the Flower processes of a real deployment, secure by default.

One place builds them, so `fedapp deploy superlink|supernode` (what operators and the
compose file run) and the deployment tests start exactly the same processes:

* SuperLink: on loopback by default (its one port serves the Control, Fleet and Runtime
  APIs alike; devices reach only the Fleet API through the proxy, fedapp/deploy/proxy.py),
  HTTPS with the private CA's server certificate, SuperNode authentication (registered keys
  only), a state database (SuperNodes survive a SuperLink restart), and runtime dependency
  installation off (it would replace the installed torch).
* SuperNode: verifies the SuperLink with ``ca.crt``, proves itself with its key, and carries
  the node config the ClientApp reads (partition, data and state folders, device facts).

Plain HTTP exists only behind an explicit ``insecure=True`` (``--insecure`` on the CLI).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from fedapp.deploy import DeployError
from fedapp.deploy.files import check_private
from fedapp.server.node_binding import binding_name

NODE_KEYS = (
    "partition-id", "num-partitions", "data-root", "state-dir", "tier", "active-fraction", "device-name", "device", "energy-sysfs-root",
    "energy-tegrastats",
)  # fmt: skip


def flower_exe(name: str) -> str:
    """A Flower executable: beside this interpreter (a venv), else on PATH."""
    here = Path(sys.executable).with_name(name)
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed next to {sys.executable} nor on PATH (flwr, a dependency of fedapp, brings it)")
    return found


def _need(path: Path, what: str) -> str:
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist (see `fedapp deploy certs` / `fedapp deploy keys`)")
    return str(path)


def superlink_argv(
    *, database: str | Path, tls_dir: str | Path | None, host: str = "127.0.0.1", port: int = 9093, auth: bool = True
) -> list[str]:
    """``tls_dir`` holds ca.crt, server.pem, server.key; ``None`` means plain HTTP (insecure).
    ``host`` defaults to loopback: whoever reaches this port reaches the Control API."""
    argv = [flower_exe("flower-superlink"), "--host", host, "--port", str(port), "--database", str(database)]
    argv += ["--disable-runtime-dependency-installation", "--isolation", "process"]  # its SuperExec: superexec_argv
    if tls_dir is None:
        if auth:
            raise DeployError("SuperNode authentication needs TLS: give the TLS folder, or turn authentication off as well (--no-auth)")
        return [*argv, "--insecure"]
    tls = Path(tls_dir)
    argv += ["--ssl-ca-certfile", _need(tls / "ca.crt", "CA certificate")]
    argv += ["--ssl-certfile", _need(tls / "server.pem", "server certificate")]
    argv += ["--ssl-keyfile", check_private(tls / "server.key", "server key")]
    return [*argv, "--enable-supernode-auth"] if auth else argv


def superexec_argv(*, host: str = "127.0.0.1", port: int = 9093, tls_dir: str | Path | None) -> list[str]:
    """The SuperExec that launches each ServerApp for a SuperLink started by ``superlink_argv``
    (``--isolation process``), as the SuperLink would start it itself, but supervised: Flower's own
    one exits for good on the first error the SuperLink answers (e.g. "database is locked" on a
    loaded machine) and every later run then waits forever (fedapp.deploy.supervise respawns it)."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    argv = [flower_exe("flower-superexec"), "--runtime-api-address", address]
    return [*argv, "--insecure"] if tls_dir is None else [*argv, "--root-certificates", _need(Path(tls_dir) / "ca.crt", "CA certificate")]


def node_config_arg(values: dict[str, object]) -> str:
    """``--node-config`` text: Flower parses each value as TOML, so strings are quoted."""
    unknown = sorted(set(values) - set(NODE_KEYS))
    if unknown:
        raise DeployError(f"unknown node-config key(s) {', '.join(unknown)}; known: {', '.join(NODE_KEYS)}")
    parts = []
    for k in NODE_KEYS:
        if k not in values or values[k] is None:
            continue
        v = values[k]
        if isinstance(v, str):
            if "'" in v or "\n" in v:
                raise DeployError(f"node-config {k} = {v!r}: quotes and newlines are not allowed")
            parts.append(f"{k}='{v}'")
        elif isinstance(v, bool) or not isinstance(v, int | float):
            raise DeployError(f"node-config {k} = {v!r}: expected a string or a number")
        else:
            parts.append(f"{k}={v}")
    return " ".join(parts)


def check_partition(pid: object, num: object) -> None:
    """A node serves one of partitions 0..num-1: anything else would be kept out by the server
    as a stranger only after the run started (and the run would wait for the partition it lacks)."""
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise DeployError(f"--num-partitions {num!r}: expected the federation's number of nodes (1 or more)")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid < num:
        raise DeployError(
            f"--partition-id {pid!r} is outside 0..{num - 1} (--num-partitions {num}): partitions are numbered from 0, one per node"
        )


RUNTIMES = ("warm", "flower")


def supernode_argv(
    *, superlink: str, node_config: dict[str, object], ca: str | Path | None, key: str | Path | None, port: int = 9094,
    runtime: str = "warm",
) -> list[str]:  # fmt: skip
    """``ca`` None means plain HTTP (insecure); ``key`` None lets the node register itself
    (accepted only by a SuperLink without ``--enable-supernode-auth``). ``runtime = "warm"``: the
    SuperNode runs under ``--isolation process`` and ``warm_runtime_argv`` runs its messages;
    ``"flower"``: Flower's own per-message ``flwr-clientapp`` process."""
    for k in ("partition-id", "num-partitions", "state-dir"):
        if node_config.get(k) in (None, ""):
            raise DeployError(f"node-config {k} is required")
    if runtime not in RUNTIMES:
        raise DeployError(f"runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
    check_partition(node_config["partition-id"], node_config["num-partitions"])
    argv = [flower_exe("flower-supernode"), "--superlink", superlink, "--port", str(port), "--node-config", node_config_arg(node_config)]
    if runtime == "warm":
        argv += ["--isolation", "process"]
    if ca is None:
        if key is not None:
            raise DeployError("an authentication key needs TLS: give the CA certificate, or drop the key as well")
        return [*argv, "--insecure"]
    argv += ["--root-certificates", _need(Path(ca), "CA certificate")]
    return [*argv, "--auth-supernode-private-key", check_private(key, "SuperNode private key")] if key is not None else argv


def warm_runtime_argv(port: int = 9094, poll_interval: float | None = None) -> list[str]:
    """fedapp's warm ClientApp runtime for the SuperNode whose Runtime API is on loopback ``port``
    (``supernode_argv(..., runtime="warm")``; plain HTTP: that API is served on this machine only)."""
    argv = [sys.executable, "-m", "fedapp.deploy.warm_runtime", "--runtime-api-address", f"127.0.0.1:{port}", "--insecure"]
    return argv if poll_interval is None else [*argv, "--poll-interval", str(poll_interval)]


def registration(arg: str) -> tuple[str, str]:
    """``KEY.pub`` or ``PARTITION=KEY.pub`` -> (key path, registered name): the key file's name,
    with the partition binding appended where one is given (fedapp.server.node_binding)."""
    part, sep, path = arg.partition("=")
    if not sep or Path(arg).is_file():
        return arg, Path(arg).name.removesuffix(".pub")
    if not part.isdigit() or (len(part) > 1 and part.startswith("0")) or len(part) > 9:
        raise DeployError(f"{arg!r}: expected KEY.pub or PARTITION=KEY.pub with PARTITION a partition-id (0, 1, ...)")
    return path, binding_name(Path(path).name.removesuffix(".pub"), int(part))


def register_argv(public_key: str | Path, connection: str, name: str = "") -> list[str]:
    argv = [flower_exe("flwr"), "supernode", "register", _need(Path(public_key), "public key"), connection]
    return [*argv, "--name", name] if name else argv
