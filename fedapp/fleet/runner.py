"""`fedapp fleet run`: bring the fleet up, run one federation on it, record what the fleet
measured, tear it all down.

The SuperLink (+ nginx proxy, `fedapp deploy superlink`, TLS and SuperNode authentication)
runs in the link namespace; SuperNode i runs in namespace ``n<i>`` and its class's cgroup,
dialing the proxy over its shaped veth. The operator's `flwr run` runs in the link namespace.
The server loop is untouched: per-round fleet rows come from the kernel's counters, sampled
when each metrics.jsonl row appears, and go to ``fleet.jsonl``; ``fleet.json`` holds each
node's class, the limits read back from the kernel and the link probe's measured rates.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from fedapp.fleet import FleetError, cgroups, images, net
from fedapp.fleet.clean import clean, prefix_of
from fedapp.fleet.power import modelled_joules
from fedapp.fleet.profile import DeviceClass, Profile
from fedapp.server.rundir import CHECKOUT_ENV

PROXY_PORT, CONTROL_PORT, NODE_PORT, PROBE_PORT = 8000, 9093, 9094, 5201
CONNECTION = "fleet"
IN_MEMORY = ":flwr-in-memory:"
SAMPLE_S = 0.5
BRING_UP_S = 1800  # each step of the bring-up; minutes on a loaded machine (the 8-node fleet on 2 shared cores)


class Stopped(Exception):
    """SIGTERM or SIGINT reached the runner: tear down and exit."""


def unavailable() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "fedapp fleet needs root and Linux (network namespaces, tc and cgroup v1)"
    if shutil.which("tc") is None or shutil.which("ip") is None:
        return "fedapp fleet needs root and Linux with iproute2 (ip, tc) installed"
    return cgroups.unavailable()


def copy_app(app: Path, dest: Path) -> Path:
    """The app's tracked and unignored files (no .venv for Flower's FAB build to walk)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=app, capture_output=True)
    if listed.returncode != 0:
        raise FleetError(f"--app {app}: not a git checkout ({listed.stderr.decode().strip()})")
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (app / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(app / name, dest / name)
    return dest


class Fleet:
    def __init__(
        self, profile: Profile, work: Path, prefix: str, image_tag: str | None = None, binds: Sequence[Path] = (), runtime: str = "warm"
    ):
        self.image_tag, self.binds, self.runtime = image_tag, [work, *binds], runtime
        self.roots: dict[str, Path] = {}  # namespace -> the mounted image its device processes run from (--images)
        self.classes: list[DeviceClass] = profile.nodes()
        self.profile, self.work, self.prefix = profile, work, prefix
        self.link = f"{prefix}link"
        self.nodes = [f"{prefix}n{i}" for i in range(len(self.classes))]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "FLWR_HOME": str(work / "flwr-home"), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
        self.env.update(FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1", PYTHONUNBUFFERED="1")
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

    # -- bring-up ---------------------------------------------------------------------------
    def create(self) -> None:
        net.create(self.link, self.nodes, [(c.uplink_mbit, c.downlink_mbit) for c in self.classes])
        for ns, c in zip(self.nodes, self.classes, strict=True):
            cgroups.create(ns, c.cpu_share, c.memory_mb)
        if self.image_tag is not None:  # one working container per device, named by the fleet's prefix
            self.roots[self.link] = images.container(f"{self.link}-img", "superlink", self.image_tag)
            for ns in self.nodes:
                self.roots[ns] = images.container(f"{ns}-img", "supernode", self.image_tag)

    def spawn(self, ns: str, argv: list[str], log: str, cgroup: str | None = None, device: bool = False) -> subprocess.Popen[bytes]:
        """``argv`` in namespace ``ns`` (and ``cgroup``); a ``device`` process (SuperLink, SuperNode)
        from its image where the fleet runs from images."""
        env = self.env
        if device and ns in self.roots:
            argv, env = images.enter(self.roots[ns], self.binds, images.in_image(argv)), images.image_env(self.env)
        with (self.work / log).open("ab") as fh:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, *argv], env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=(lambda: cgroups.join(cgroup)) if cgroup else None,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        p = self.work / name
        return p.read_text(errors="replace") if p.exists() else ""

    def wait_for(self, cond: Any, timeout: float, what: str, log: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise FleetError(f"timed out after {timeout:.0f}s waiting for {what}; last lines of {log}: {self.log(log)[-800:]}")
            time.sleep(2.0)

    def start_superlink(self) -> None:
        from fedapp.deploy.certs import make_certs
        from fedapp.deploy.connection import write_connection
        from fedapp.deploy.keys import make_node_keys

        self.tls = make_certs(["127.0.0.1", "localhost", *(net.link_address(i) for i in range(len(self.nodes)))], self.work / "tls")
        self.keys = make_node_keys(len(self.nodes), self.work / "keys")
        write_connection(CONNECTION, f"127.0.0.1:{CONTROL_PORT}", self.tls.ca_cert, self.work / "flwr-home", default=True)
        argv = [sys.executable, "-m", "fedapp", "deploy", "superlink", "--tls", str(self.tls.ca_cert.parent)]
        # Flower's in-memory state: its SQLite file answered "database is locked" (HTTP 500) under load, losing
        # replies and heartbeats mid-round (docs/fleet.md); a fleet's SuperLink is never restarted, so nothing is lost
        argv += ["--database", IN_MEMORY, "--host", "0.0.0.0", "--port", str(PROXY_PORT)]
        argv += ["--control-port", str(CONTROL_PORT), "--proxy-dir", str(self.work / "proxy"), "--no-restart"]
        self.spawn(self.link, argv, "superlink.log", device=True)
        self.wait_for(lambda: "Application startup complete" in self.log("superlink.log"), BRING_UP_S, "the SuperLink", "superlink.log")

    def register(self) -> None:
        procs = []
        for i, (_, pub) in enumerate(self.keys):
            argv = [sys.executable, "-m", "fedapp", "deploy", "register", "--connection", CONNECTION, f"{i}={pub}"]
            procs.append(self.spawn(self.link, argv, f"register-{i}.log"))
        for i, proc in enumerate(procs):
            if proc.wait(timeout=BRING_UP_S) != 0:
                raise FleetError(f"registering node {i} failed: {self.log(f'register-{i}.log')[-800:]}")

    def start_nodes(self) -> None:
        from fedapp.deploy.commands import supernode_argv, warm_runtime_argv

        for i, (ns, c) in enumerate(zip(self.nodes, self.classes, strict=True)):
            node_dir = self.work / f"node-{i}"
            node_dir.mkdir()
            config: dict[str, object] = {
                "partition-id": i, "num-partitions": len(self.nodes), "state-dir": str(node_dir / "state"),
                "device-name": f"{c.name}-{i}", "active-fraction": c.active_fraction,
            }  # fmt: skip
            link = f"{net.link_address(i)}:{PROXY_PORT}"
            argv = supernode_argv(
                superlink=link, node_config=config, ca=self.tls.ca_cert, key=self.keys[i][0], port=NODE_PORT, runtime=self.runtime
            )
            self.spawn(ns, argv, f"node-{i}.log", cgroup=ns, device=True)
            if self.runtime == "warm":  # its ClientApp runtime, in the node's namespace and cgroup (its CPU is the node's)
                self.spawn(ns, warm_runtime_argv(NODE_PORT), f"node-{i}.log", cgroup=ns, device=True)

    def online(self) -> int:
        flwr = str(Path(sys.executable).with_name("flwr"))
        argv = ["ip", "netns", "exec", self.link, flwr, "supernode", "ls", CONNECTION, "--format", "json"]
        try:  # a CLI call can take a minute on a loaded machine: a slow answer counts as none
            out = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=120).stdout
        except subprocess.TimeoutExpired:
            return 0
        try:
            return sum(1 for n in json.loads(out[out.index("{") :])["nodes"] if n.get("status") == "online")
        except (ValueError, KeyError):
            return 0

    # -- measuring ----------------------------------------------------------------------------
    def limits(self) -> list[dict[str, Any]]:
        """Each node's class and its limits as the kernel holds them."""
        out = []
        for i, (ns, c) in enumerate(zip(self.nodes, self.classes, strict=True)):
            up, down = net.htb_class(ns, net.NODE_DEV), net.htb_class(self.link, net.link_dev(i))
            out.append({
                "node": i, "class": c.name, "namespace": ns, "address": net.node_address(i),
                "configured": {"cpu_share": c.cpu_share, "uplink_mbit": c.uplink_mbit, "downlink_mbit": c.downlink_mbit,
                               "memory_mb": c.memory_mb, "active_fraction": c.active_fraction,
                               "idle_watts": c.idle_watts, "busy_watts": c.busy_watts},
                "kernel": {"uplink_rate_bps": up["rate_bps"], "uplink_ceil_bps": up["ceil_bps"],
                           "downlink_rate_bps": down["rate_bps"], "downlink_ceil_bps": down["ceil_bps"], **cgroups.limits(ns)},
            })  # fmt: skip
        return out

    def counters(self) -> list[dict[str, float]]:
        """Per node: bytes up (node -> SuperLink) and down through its link, its CPU seconds and quota-throttled seconds."""
        links = json.loads(net.run("ip", "-j", "-s", "-n", self.link, "link", "show"))
        by_dev = {d["ifname"]: d["stats64"] for d in links}
        return [
            {
                "up": by_dev[net.link_dev(i)]["rx"]["bytes"],
                "down": by_dev[net.link_dev(i)]["tx"]["bytes"],
                "cpu": cgroups.cpu_seconds(ns),
                "throttled": cgroups.throttled_seconds(ns),
            }
            for i, ns in enumerate(self.nodes)
        ]

    def probe(self, min_bytes: int) -> list[dict[str, float]]:
        """Measured Mbit/s of every link, up and down (all links at once, one direction at a time):
        at least ``min_bytes``, and at least 2 s worth of the link's rate, so fixed costs stay small."""
        mod = [sys.executable, "-m", "fedapp.fleet.probe"]
        result: list[dict[str, float]] = [{} for _ in self.nodes]
        for direction in ("up", "down"):
            pairs = []
            for i, (ns, c) in enumerate(zip(self.nodes, self.classes, strict=True)):
                rx_ns, tx_ns, host = (self.link, ns, net.link_address(i)) if direction == "up" else (ns, self.link, net.node_address(i))
                nbytes = max(min_bytes, round((c.uplink_mbit if direction == "up" else c.downlink_mbit) * 1e6 / 8 * 2))
                rx = subprocess.Popen(["ip", "netns", "exec", rx_ns, *mod, "recv", host, str(PROBE_PORT)], env=self.env,
                                      stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
                assert rx.stdout is not None
                if rx.stdout.readline().strip() != "ready":
                    raise FleetError(f"link probe receiver in {rx_ns} did not start")
                tx = subprocess.Popen(["ip", "netns", "exec", tx_ns, *mod, "send", host, str(PROBE_PORT), str(nbytes)], env=self.env,
                                      stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
                pairs.append((rx, tx))
            for i, (rx, tx) in enumerate(pairs):
                got = json.loads(tx.communicate(timeout=600)[0])
                rx.wait(timeout=60)
                result[i][f"{direction}_bytes"] = got["bytes"]
                result[i][f"{direction}_seconds"] = got["seconds"]
                result[i][f"{direction}_mbit_s"] = got["bytes"] * 8 / got["seconds"] / 1e6
        return result

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


class RoundRecorder:
    """Per-round fleet rows: bytes and CPU seconds per node between consecutive metrics rows,
    modelled joules from them, and when each node's upload of the round was 90% through."""

    def __init__(self, fleet: Fleet, run_dir: Path):
        self.fleet, self.run_dir = fleet, run_dir
        self.out = run_dir / "fleet.jsonl"
        self.out.write_text("")
        self.seen = 0
        self.t0 = time.monotonic()
        self.start = fleet.counters()
        self.ticks: list[tuple[float, list[dict[str, float]]]] = [(self.t0, self.start)]

    def rows(self) -> list[dict[str, Any]]:
        path = self.run_dir / "metrics.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if line.endswith("}")]

    def tick(self) -> None:
        now, counts = time.monotonic(), self.fleet.counters()
        self.ticks.append((now, counts))
        for row in self.rows()[self.seen :]:
            self.seen += 1
            self.write(row, now, counts)

    def write(self, row: dict[str, Any], now: float, counts: list[dict[str, float]]) -> None:
        wall = now - self.t0
        nodes: list[dict[str, Any]] = []
        for i, c in enumerate(self.fleet.classes):
            up = counts[i]["up"] - self.start[i]["up"]
            cpu = counts[i]["cpu"] - self.start[i]["cpu"]
            t90 = next(t for t, cs in self.ticks if cs[i]["up"] - self.start[i]["up"] >= 0.9 * up) - self.t0
            nodes.append({
                "node": i, "class": c.name, "bytes_up": up, "bytes_down": counts[i]["down"] - self.start[i]["down"],
                "cpu_seconds": round(cpu, 3), "throttled_s": round(counts[i]["throttled"] - self.start[i]["throttled"], 3),
                "upload_90_s": round(t90, 2),
                "modelled_joules": round(modelled_joules(c, wall, cpu), 3),
            })  # fmt: skip
        slowest = max(nodes, key=lambda n: n["upload_90_s"])
        out = {
            "round": row["round"], "wall_seconds": round(wall, 3), "server_seconds": row.get("seconds"), "accuracy": row.get("accuracy"),
            "slowest_node": slowest["node"], "slowest_class": slowest["class"],
            "modelled_joules": round(sum(n["modelled_joules"] for n in nodes), 3), "nodes": nodes,
        }  # fmt: skip
        with self.out.open("a") as fh:
            fh.write(json.dumps(out) + "\n")
        self.t0, self.start, self.ticks = now, counts, [(now, counts)]


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signal.Signals(signum).name)


def run_fleet(
    profile: Profile, runs: Sequence[Mapping[str, Any]], app: Path, probe_kb: int = 0, image_tag: str | None = None, runtime: str = "warm"
) -> int:
    """The whole `fedapp fleet run`: each of ``runs`` (run-config overrides) one after another on
    one fleet; returns the exit code (1 when any run failed). With ``image_tag`` the SuperLink and
    the SuperNodes run from the built images of that tag (fedapp.fleet.images)."""
    from fedapp.core.config import ConfigError
    from fedapp.sim.flwr_run import preflight

    problem = unavailable() or (images.unavailable(image_tag) if image_tag is not None else None)
    if problem:
        print(f"fedapp: error: {problem}", file=sys.stderr)
        return 2
    n = len(profile.nodes())
    try:  # every run checked before anything is created
        run_dirs = [preflight({**o, "num-clients": n}, Path.cwd())[1] for o in runs]
    except ConfigError as err:
        print(f"fedapp: error: {err}", file=sys.stderr)
        return 2
    prefix = prefix_of(os.getpid())
    work = Path("/tmp") / f"{prefix}work"
    old = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    fleet = Fleet(profile, work, prefix, image_tag, run_dirs, runtime)
    try:
        work.mkdir(mode=0o700)
        for run_dir in run_dirs if image_tag is not None else ():  # bound into the SuperLink's image, so made first
            run_dir.mkdir(parents=True, exist_ok=True)
        fleet.create()
        print(f"fedapp fleet: {n} nodes ({', '.join(f'{c.count} {c.name}' for c in profile.classes)}), names {prefix}*", flush=True)
        fleet.env[CHECKOUT_ENV] = str(app.resolve())  # its commit goes into each run's provenance while its code is the FAB's
        fleet.start_superlink()
        fleet.register()
        fleet.start_nodes()
        # each SuperNode logs its id once the SuperLink accepted it (cheap to watch); then the SuperLink's own count
        accepted = lambda: all("SuperNode ID:" in fleet.log(f"node-{i}.log") for i in range(n))  # noqa: E731
        fleet.wait_for(accepted, BRING_UP_S, f"{n} SuperNodes accepted by the SuperLink", "node-0.log")
        fleet.wait_for(lambda: fleet.online() >= n, BRING_UP_S, f"{n} SuperNodes online", "node-0.log")
        info: dict[str, Any] = {"profile": profile.name, "nodes": fleet.limits(), "modelled_energy": "idle + (busy-idle) * utilisation"}
        if probe_kb:
            for node, measured in zip(info["nodes"], fleet.probe(probe_kb * 1024), strict=True):
                node["probe"] = measured
        app_copy = copy_app(app.resolve(), work / "app")
        pairs = enumerate(zip(runs, run_dirs, strict=True))
        codes = [one_run(fleet, {**o, "num-clients": n}, d, app_copy, info, f"run-{k}") for k, (o, d) in pairs]
        return 1 if any(codes) else 0  # a failed run is reported and the next one still runs
    except Stopped as why:
        print(f"fedapp fleet: stopped by {why}; tearing down", file=sys.stderr)
        return 130
    finally:
        for s in old:  # a second Ctrl-C must not cut the teardown short
            signal.signal(s, signal.SIG_IGN)
        try:
            fleet.stop()
        finally:
            for run_dir in run_dirs:
                if run_dir.is_dir() and work.is_dir():
                    logs = run_dir / "fleet-logs"
                    logs.mkdir(exist_ok=True)
                    for f in work.glob("*.log"):
                        shutil.copy2(f, logs / f.name)
            clean(prefix)
            for s, h in old.items():
                signal.signal(s, h)


def one_run(fleet: Fleet, overrides: Mapping[str, Any], run_dir: Path, app_copy: Path, info: dict[str, Any], name: str) -> int:
    """`flwr run` of one run-config on the fleet, sampled every SAMPLE_S seconds until it ends."""
    from fedapp.sim.flwr_run import reason_for, write_run_config

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "fleet.json").write_text(json.dumps(info, indent=2) + "\n")
    config_file = write_run_config({**overrides, "run-dir": str(run_dir)}, fleet.work / f"{name}.toml")
    flwr = str(Path(sys.executable).with_name("flwr"))
    print(f"fedapp fleet: {name} -> {run_dir}", flush=True)
    started = time.time()
    rec = RoundRecorder(fleet, run_dir)
    proc = fleet.spawn(fleet.link, [flwr, "run", str(app_copy), CONNECTION, "--stream", "--run-config", str(config_file)], f"{name}.log")
    while proc.poll() is None:
        time.sleep(SAMPLE_S)
        rec.tick()
    rec.tick()
    reason = reason_for(run_dir, started, fleet.log(f"{name}.log").splitlines(), proc.returncode)
    if reason:
        print(f"fedapp: error: {reason}", file=sys.stderr)
        return 1
    print(f"results in {run_dir} (fleet.json, fleet.jsonl)", flush=True)
    return 0
