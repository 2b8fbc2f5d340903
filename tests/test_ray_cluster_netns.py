"""engine-workers on a real two-node Ray cluster on this machine: a head and a worker node, each a
``ray start --block`` process in its own network namespace with its own veth address, so the run's
traffic crosses a link. Each node offers 1 CPU, so the two workers (num-threads 1 each) land one per
node; the run's rows name the node that trained each client, and rows and model equal a one-process
run's. Needs root (ip netns); slow (two Ray nodes): `pytest -n 0 -m slow tests/test_ray_cluster_netns.py`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedapp.sim.run_local import run_local
from tests.flwr_harness import FLWR, copy_checkout, run_env, toml_value
from tests.run_rows import outcome_rows

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
TAG = f"rayw{os.getpid() % 100000}"
HEAD_NS, WORK_NS = f"{TAG}-head", f"{TAG}-work"
HEAD_IP, WORK_IP = "10.213.7.1", "10.213.7.2"  # on the veth between the two namespaces only
RUN = {
    "dataset": "digits", "partition": "iid", "num-clients": 4, "num-server-rounds": 2, "local-steps": 4, "batch-size": 16,
    "mlp-hidden": "32",
}  # fmt: skip


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def in_ns(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


def ns_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}


def start_node(ns: str, ip: str, tmp: Path, head: bool) -> subprocess.Popen[bytes]:
    own = ["--head", "--port=6379", f"--temp-dir={tmp / 'ray'}", "--include-dashboard=false"]
    role = own if head else [f"--address={HEAD_IP}:6379"]
    cmd = [RAY, "start", "--block", f"--node-ip-address={ip}", "--num-cpus=1", "--num-gpus=0", "--object-store-memory=100000000", *role]
    log = open(tmp / f"{ns}.log", "wb")  # noqa: SIM115 - kept open for the node's lifetime
    return subprocess.Popen(in_ns(ns, *cmd), stdout=log, stderr=subprocess.STDOUT, env=env(), start_new_session=True)


STARTED = "Ray runtime started"  # what `ray start` logs once its node runs


def wait_started(tmp: Path, ns: str, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> None:
    log = tmp / f"{ns}.log"
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if STARTED in log.read_text(errors="replace"):
            return
        time.sleep(2)
    raise AssertionError(f"ray start in {ns} did not start within {timeout}s:\n{log.read_text(errors='replace')[-2000:]}")


def alive_nodes() -> list[str]:
    probe = (
        f"import ray; ray.init(address='{HEAD_IP}:6379', logging_level='ERROR'); "
        "print(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']))"
    )
    got = subprocess.run(in_ns(HEAD_NS, sys.executable, "-c", probe), capture_output=True, text=True, env=env(), timeout=300)
    return got.stdout.strip().splitlines()[-1:]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """The nodes' process groups, then anything still running in the namespaces, by PID."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    for ns in (HEAD_NS, WORK_NS):
        for pid in ns_pids(ns):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp_path = tmp_path_factory.mktemp("cluster")
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("needs root and iproute2 (network namespaces)")
    procs: list[subprocess.Popen[bytes]] = []
    short = tmp_path
    try:
        for ns in (HEAD_NS, WORK_NS):
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", f"{TAG}-h", "netns", HEAD_NS, "type", "veth", "peer", "name", f"{TAG}-w", "netns", WORK_NS)
        for ns, dev, ip in ((HEAD_NS, f"{TAG}-h", HEAD_IP), (WORK_NS, f"{TAG}-w", WORK_IP)):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        short = Path(tempfile.mkdtemp(prefix="rw", dir="/tmp"))  # Ray's socket paths must stay under 108 bytes
        (short / "ray").mkdir()
        procs.append(start_node(HEAD_NS, HEAD_IP, short, head=True))
        wait_started(short, HEAD_NS, procs[0])
        procs.append(start_node(WORK_NS, WORK_IP, short, head=False))
        wait_started(short, WORK_NS, procs[1])
        assert alive_nodes() == [str(sorted([HEAD_IP, WORK_IP]))]
        yield tmp_path
    finally:
        stop(procs)
        for ns in (HEAD_NS, WORK_NS):  # deleting a namespace deletes its end of the veth, and with it the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if short != tmp_path:
            shutil.rmtree(short, ignore_errors=True)


def test_two_workers_on_two_namespaced_ray_nodes_train_the_clients_of_one_process(cluster: Path) -> None:
    one = run_local({**RUN, "run-dir": str(cluster / "one")})
    keys = " ".join(f"{k}={json.dumps(v)}" for k, v in RUN.items())
    args = [keys, f'engine-workers=2 ray-address="{HEAD_IP}:6379" run-dir="{cluster / "two"}"']
    cmd = in_ns(HEAD_NS, sys.executable, "-m", "fedapp", "run", "--no-progress", *args)  # the driver on the head node
    got = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=600)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    rows = outcome_rows(cluster / "two")
    placed = [row.pop("engine_workers") for row in rows]
    assert rows == outcome_rows(one)
    with np.load(one / "model.npz") as a, np.load(cluster / "two" / "model.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    for where in placed:  # every client trained, partitions of one worker on one node, both nodes used
        assert sorted(where) == ["0", "1", "2", "3"]
        assert where["0"] == where["2"] and where["1"] == where["3"]
        assert {w.split("@")[1] for w in where.values()} == {HEAD_IP, WORK_IP}


def test_flwr_run_joins_the_ray_cluster_through_ray_address(cluster: Path) -> None:
    """The recipe of README "Flower on a Ray cluster": a SuperLink started with RAY_ADDRESS set, so
    Flower's Ray backend (``ray.init()``) joins the cluster; the simulated clients run on both nodes."""
    co = copy_checkout(cluster / "app" / "fedapp")
    run_env_ = {**run_env(co), "RAY_ADDRESS": f"{HEAD_IP}:6379"}
    home = Path(run_env_["FLWR_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[superlink]\ndefault = "ray"\n\n[superlink.ray]\naddress = "127.0.0.1:8000"\ninsecure = true\n')
    superlink = str(Path(FLWR).with_name("flower-superlink"))
    log = open(cluster / "superlink.log", "wb")  # noqa: SIM115 - the SuperLink's lifetime
    link = subprocess.Popen(
        in_ns(HEAD_NS, superlink, "--insecure", "--simulation", "--isolation", "subprocess"),
        env=run_env_, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        end = time.monotonic() + 120
        while "Uvicorn running" not in (cluster / "superlink.log").read_text(errors="replace") and time.monotonic() < end:
            time.sleep(1)
        overrides = " ".join(f"{k}={toml_value(v)}" for k, v in {**RUN, "run-dir": str(cluster / "flwr")}.items())
        federation = "num-supernodes=4 client-resources-num-cpus=1"
        cmd = in_ns(HEAD_NS, FLWR, "run", str(co), "ray", "--stream", "--run-config", overrides, "--federation-config", federation)
        got = subprocess.run(cmd, cwd=co, env=run_env_, capture_output=True, text=True, timeout=600)
    finally:
        os.killpg(link.pid, signal.SIGTERM)
        link.wait(timeout=60)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    assert f"ip={WORK_IP}" in got.stdout + got.stderr  # Ray names the worker node of the clients that ran there
    one = run_local({**RUN, "run-dir": str(cluster / "one-flwr")})
    assert [(r["accuracy"], r["loss"], r["clients"], r["failures"]) for r in outcome_rows(cluster / "flwr")] == [
        (r["accuracy"], r["loss"], r["clients"], r["failures"]) for r in outcome_rows(one)
    ]


def test_a_ray_node_killed_mid_round_fails_only_its_clients_and_the_run_goes_on(cluster: Path) -> None:
    """Runs last: it kills the module's worker node. Its worker's clients of round 2 fail; a
    replacement cannot be placed (the head's one CPU is taken), so after the restart timeout its
    nodes go to the head's worker and round 3 trains all four clients there."""
    marker, run = cluster / "held", cluster / "node-kill"
    raw = {**RUN, "num-server-rounds": 3, "engine-workers": 2, "ray-address": f"{HEAD_IP}:6379", "run-dir": str(run)}
    log = open(cluster / "node-kill.log", "wb")  # noqa: SIM115 - the driver's lifetime
    cmd = in_ns(HEAD_NS, sys.executable, "-m", "tests.held_round", json.dumps(raw), "2", str(marker), WORK_IP)
    driver = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 300
        while not marker.exists() and driver.poll() is None and time.monotonic() < end:
            time.sleep(0.5)
        assert marker.exists(), (cluster / "node-kill.log").read_text(errors="replace")[-3000:]
        held = int(marker.read_text())
        for pid in ns_pids(WORK_NS):  # the whole worker node: its raylet, its workers
            os.kill(pid, signal.SIGKILL)
        assert driver.wait(timeout=400) == 0, (cluster / "node-kill.log").read_text(errors="replace")[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=60)
    rows = outcome_rows(run)
    lost = {held, (held + 2) % 4}  # the killed node's worker held partitions p and p + 2
    assert [(r["round"], r["clients"], r["failures"]) for r in rows] == [(1, 4, 0), (2, 2, 2), (3, 4, 0)]
    assert set(rows[1]["failed_pids"]) == lost
    assert all("engine worker" in why and WORK_IP in why for why in rows[1]["failure_reasons"])
    assert {w.split("@")[1] for w in rows[0]["engine_workers"].values()} == {HEAD_IP, WORK_IP}
    assert sorted(rows[1]["engine_workers"]) == sorted({"0", "1", "2", "3"} - {str(p) for p in lost})
    assert sorted(rows[2]["engine_workers"]) == ["0", "1", "2", "3"]
    assert {w.split("@")[1] for w in rows[2]["engine_workers"].values()} == {HEAD_IP}
