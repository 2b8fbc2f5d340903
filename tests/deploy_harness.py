"""A real deployment for tests: SuperLink + SuperNodes as separate processes, started with
`fedapp deploy ...` (the documented path) under TLS and SuperNode authentication, in the
secure shape: flower-superlink on loopback (``control_port``, where the operator's CLI
connects, as through an SSH tunnel) and the nginx proxy on ``port``, where SuperNodes dial.

Everything lives in one temp folder (own FLWR_HOME per process, state database, TLS
material, keys) on free ports. Every process is started in its own session and stopped
by its process group id, so only what a test started is ever signalled. With ``netns``
each SuperNode runs in its own network namespace (see tests/netns.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedapp.deploy.certs import make_certs
from fedapp.deploy.connection import write_connection
from fedapp.deploy.keys import make_node_keys
from fedapp.deploy.proxy import find_nginx
from tests.flwr_harness import ROOT, free_port, shared_checkout, toml_value
from tests.netns import Netns

PY = sys.executable
FLWR = str(Path(PY).with_name("flwr"))
CONNECTION = "fedtest"


def base_env(home: Path) -> dict[str, str]:
    """``FEDAPP_CHECKOUT``: the checkout `flwr run` submits (the ServerApp records its commit when
    its code is the app bundle's, fedapp.server.provenance), as an operator sets it on the SuperLink host."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        FEDAPP_CHECKOUT=str(shared_checkout()),
        FLWR_HOME=str(home), FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1", PYTHONUNBUFFERED="1", PATH=f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )  # fmt: skip
    return env


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def stop_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, wait: float = 20.0) -> None:
    """Signal the process group ``proc`` leads (its own session) and every process it spawned
    (Flower starts some helpers in sessions of their own), then make sure all are gone.
    A process already reaped is left alone: its pid may belong to someone else by now."""
    if proc.returncode is not None:
        return
    spawned = {p: cmdline(p) for p in descendants(proc.pid)}
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    for pid in spawned:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=wait)
    with contextlib.suppress(ProcessLookupError):  # stragglers (a ClientApp mid-message) get no second chance
        os.killpg(proc.pid, signal.SIGKILL)
    for pid, cmd in spawned.items():
        if cmdline(pid) == cmd:  # still the same process, not a recycled pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=10)


@dataclass
class Federation:
    tmp: Path
    num_nodes: int
    netns: Netns | None = None
    port: int = 0  # the proxy: what devices (and anyone else on the network) reach
    control_port: int = 0  # flower-superlink itself, on loopback: the operator's Control API
    superlink: subprocess.Popen[bytes] | None = None
    nodes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    runs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    node_env: dict[int, dict[str, str]] = field(default_factory=dict)  # extra environment of node i's processes
    runtime: str = "warm"  # each SuperNode's ClientApp runtime: fedapp's warm one, or Flower's process per message
    node_args: dict[int, list[str]] = field(default_factory=dict)  # extra `fedapp deploy supernode` arguments of node i
    cgroup_prefix: str | None = None  # node i's processes in cgroup <prefix><i> (made by the caller: fedapp.fleet.cgroups)

    def __post_init__(self) -> None:
        find_nginx()  # the secure shape needs it: fail here, naming the package, rather than time out
        self.home = self.tmp / "flwr-home"
        self.port = self.port or free_port()
        self.control_port = self.control_port or free_port()
        addresses = ["127.0.0.1", "localhost"] + ([self.netns.link_address(i) for i in range(self.num_nodes)] if self.netns else [])
        self.tls = make_certs(addresses, self.tmp / "tls")
        self.keys = make_node_keys(self.num_nodes, self.tmp / "keys")
        self.rogue_key = make_node_keys(1, self.tmp / "keys", prefix="unregistered")[0]
        write_connection(CONNECTION, f"127.0.0.1:{self.control_port}", self.tls.ca_cert, self.home, default=True)

    # -- processes ----------------------------------------------------------------------
    def _spawn(
        self, argv: list[str], log: Path, home: Path, ns: str | None, env: dict[str, str] | None = None, cgroup: str | None = None
    ) -> subprocess.Popen[bytes]:
        if ns is not None:
            argv = ["ip", "netns", "exec", ns, *argv]
        join = None
        if cgroup is not None:
            from fedapp.fleet.cgroups import join as join_cgroup

            join = lambda: join_cgroup(cgroup)  # noqa: E731
        with log.open("ab") as fh:
            return subprocess.Popen(
                argv, cwd=ROOT, env={**base_env(home), **(env or {})}, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=join,
            )  # fmt: skip

    def start_superlink(self) -> None:
        argv = [PY, "-m", "fedapp", "deploy", "superlink", "--tls", str(self.tls.ca_cert.parent), "--database", str(self.tmp / "state.db")]
        argv += ["--host", "0.0.0.0" if self.netns else "127.0.0.1", "--port", str(self.port), "--control-port", str(self.control_port)]
        argv += ["--proxy-dir", str(self.tmp / "proxy"), "--no-restart"]
        self.superlink = self._spawn(argv, self.tmp / "superlink.log", self.home, self.netns.link if self.netns else None)
        self.wait_for(lambda: "Application startup complete" in self.log("superlink"), 90, "SuperLink start")

    def register(self, keys: list[str] | None = None) -> list[str]:
        """`fedapp deploy register` for each of ``keys`` (default: node key i bound to partition i),
        in parallel (each CLI call costs seconds); returns each call's output."""
        keys = keys or [f"{i}={pub}" for i, (_, pub) in enumerate(self.keys)]
        procs = [self.cli([PY, "-m", "fedapp", "deploy", "register", "--connection", CONNECTION, key]) for key in keys]
        outs = [proc.communicate(timeout=180)[0] for proc in procs]
        for proc, out in zip(procs, outs, strict=True):
            assert proc.returncode == 0, out
        return outs

    def cli(self, argv: list[str]) -> subprocess.Popen[str]:
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns.link, *argv]
        return subprocess.Popen(argv, cwd=ROOT, env=base_env(self.home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def superlink_address(self, i: int) -> str:
        return f"{self.netns.link_address(i) if self.netns else '127.0.0.1'}:{self.port}"

    def node_argv(self, i: int, key: Path, restart: bool = True, partition: int | None = None) -> list[str]:
        """Node ``i`` (folder node-i) with ``key``, claiming ``partition`` (default: i)."""
        node_dir = self.tmp / f"node-{i}"
        argv = [PY, "-m", "fedapp", "deploy", "supernode", "--superlink", self.superlink_address(i), "--ca", str(self.tls.ca_cert)]
        argv += ["--key", str(key), "--partition-id", str(i if partition is None else partition), "--num-partitions", str(self.num_nodes)]
        argv += ["--state-dir", str(node_dir / "state"), "--tier", "edge", "--device-name", f"board-{i}", "--port", str(free_port())]
        argv += ["--runtime", self.runtime, *self.node_args.get(i, [])]
        return argv + (["--restart-delay", "5"] if restart else ["--no-restart"])

    def start_node(self, i: int, key: Path | None = None, partition: int | None = None) -> None:
        """Node ``i`` with its own key (or ``key``), claiming its partition (or ``partition``)."""
        node_dir = self.tmp / f"node-{i}"
        node_dir.mkdir(exist_ok=True)
        ns = self.netns.node(i) if self.netns else None
        argv = self.node_argv(i, self.keys[i][0] if key is None else key, partition=partition)
        cgroup = None if self.cgroup_prefix is None else f"{self.cgroup_prefix}{i}"
        self.nodes[i] = self._spawn(argv, node_dir / "log", node_dir / "flwr-home", ns, self.node_env.get(i), cgroup)

    def start(self) -> Federation:
        self.start_superlink()
        self.register()
        for i in range(self.num_nodes):
            self.start_node(i)
        self.wait_for(lambda: self.online() >= self.num_nodes, 120, f"{self.num_nodes} SuperNodes online")
        return self

    def kill_node(self, i: int) -> None:
        """Power loss: SIGKILL to the node's supervisor, SuperNode and ClientApp alike."""
        stop_group(self.nodes.pop(i), signal.SIGKILL)

    def kill_superlink(self) -> None:
        assert self.superlink is not None
        stop_group(self.superlink, signal.SIGKILL)
        for run in self.runs:  # the CLI streaming that run's log loses its SuperLink too
            stop_group(run, signal.SIGKILL)
        self.runs.clear()

    def stop(self) -> None:
        for proc in [*self.runs, *self.nodes.values(), *([self.superlink] if self.superlink else [])]:
            stop_group(proc)

    # -- observing ------------------------------------------------------------------------
    def log(self, name: str) -> str:
        path = self.tmp / (f"{name}.log" if name == "superlink" else f"{name}/log")
        return path.read_text(errors="replace") if path.exists() else ""

    def registered(self) -> list[dict[str, Any]]:
        """Every SuperNode the SuperLink knows (`flwr supernode ls --format json` by the operator)."""
        proc = self.cli([FLWR, "supernode", "ls", CONNECTION, "--format", "json"])
        out, _ = proc.communicate(timeout=120)
        try:
            return list(json.loads(out[out.index("{") :])["nodes"])
        except (ValueError, KeyError):
            return []

    def online(self) -> int:
        return sum(1 for n in self.registered() if n.get("status") == "online")

    def flower_pid(self, i: int) -> int:
        """The flower-supernode process under node ``i``'s supervisor."""
        return next(p for p in descendants(self.nodes[i].pid) if "flower-supernode" in cmdline(p))

    @staticmethod
    def wait_for(cond: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(1.0)

    # -- runs -------------------------------------------------------------------------------
    def submit(self, run_config: dict[str, object], log_name: str, app: Path | None = None) -> subprocess.Popen[bytes]:
        """`flwr run <app> fedtest --stream --run-config ...`; by default the FAB is built from the session's copy
        of the checkout (tests/flwr_harness.py), which has no .venv for the build to walk."""
        overrides = " ".join(f"{k}={toml_value(v)}" for k, v in run_config.items())
        argv = [FLWR, "run", str(app or shared_checkout()), CONNECTION, "--stream", "--run-config", overrides]
        proc = self._spawn(argv, self.tmp / f"{log_name}.log", self.home, self.netns.link if self.netns else None)
        self.runs.append(proc)
        return proc

    def run(self, run_config: dict[str, object], log_name: str, timeout: float = 600) -> str:
        proc = self.submit(run_config, log_name)
        try:
            proc.wait(timeout=timeout)
        finally:
            stop_group(proc)
            self.runs.remove(proc)
        return (self.tmp / f"{log_name}.log").read_text(errors="replace")


def rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def io_bytes(pid: int) -> dict[str, int]:
    """Bytes a process passed to write/send (wchar) and read/recv (rchar) syscalls so far."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return {"wchar": int(fields["wchar"]), "rchar": int(fields["rchar"])}
