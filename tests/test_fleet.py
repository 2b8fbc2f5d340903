"""`fedapp fleet run` for real (root, Linux): two nodes of two classes, two rounds of digits.
While it runs, the HTB classes and cgroup limits are read from the kernel and compared with
the profile; afterwards the run's rows, the link probe's rates (printed, not asserted: no
timing asserts) and that nothing of the fleet is left. A second fleet is SIGKILLed mid-run:
its namespaces, cgroups and processes stay until `fedapp fleet clean PID`, then are gone.
Slow (minutes on 2 shared cores: each message starts a ClientApp process under its quota;
the images test uses images.sh's tag 0.1.0, or FEDAPP_IMAGE_TAG):
  pytest -n 0 -q -m slow tests/test_fleet.py -s
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedapp.fleet.clean import leftovers, prefix_of
from fedapp.fleet.runner import unavailable

pytestmark = [pytest.mark.flwr, pytest.mark.slow, pytest.mark.skipif((why := unavailable()) is not None, reason=str(why))]
ROOT = Path(__file__).resolve().parents[1]
TAG = os.environ.get("FEDAPP_IMAGE_TAG", "0.1.0")  # scripts/images.sh's default tag, or the one named
PROFILE = """name = "ci-pair"
[class.fast]
count = 1
cpu-share = 1.0
uplink-mbit = 8
downlink-mbit = 8
memory-mb = 2048
idle-watts = 5.0
busy-watts = 15.0
[class.slow]
count = 1
cpu-share = 0.5
uplink-mbit = 2
downlink-mbit = 4
memory-mb = 1024
active-fraction = 0.5
idle-watts = 1.0
busy-watts = 4.0
"""
# (class, cfs_quota_us, memory bytes, uplink bit/s, downlink bit/s), computed by hand from PROFILE
EXPECTED = [("fast", 100_000, 2048 << 20, 8_000_000, 8_000_000), ("slow", 50_000, 1024 << 20, 2_000_000, 4_000_000)]
# discovery waits for every node's first ClientApp (a torch import under its quota): minutes on a loaded machine
RUN = "dataset='digits' model='mlp' num-server-rounds=2 local-steps=4 lr=0.3 overwrite=true discovery-timeout=1800.0"


def start(tmp: Path, run_dir: Path, probe: bool, images: str | None = None) -> subprocess.Popen[str]:
    (tmp / "profile.toml").write_text(PROFILE)
    argv = [sys.executable, "-m", "fedapp", "fleet", "run", str(tmp / "profile.toml"), f"{RUN} run-dir='{run_dir}'"]
    argv += ["--images", images] if images else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (tmp / f"{run_dir.name}.out").open("w")
    argv += ["--probe-kb", "256"] if probe else []
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def wait_for(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def kernel_limits(prefix: str, i: int) -> tuple[int, int, int, int]:
    ns = f"{prefix}n{i}"
    cg = Path("/sys/fs/cgroup")
    quota = int((cg / "cpu" / ns / "cpu.cfs_quota_us").read_text())
    mem = int((cg / "memory" / ns / "memory.limit_in_bytes").read_text())

    def rate(netns: str, dev: str) -> int:
        out = subprocess.run(["tc", "-n", netns, "class", "show", "dev", dev], capture_output=True, text=True, check=True).stdout
        m = re.search(r"htb 1:10 .*\brate (\d+)([KM]?)bit ceil (\d+)([KM]?)bit", out)
        assert m is not None, out
        assert m.group(1, 2) == m.group(3, 4), f"ceil differs from rate: {out}"  # no borrowing beyond the class rate
        return int(m[1]) * {"": 1, "K": 1000, "M": 1_000_000}[m[2]]

    return quota, mem, rate(ns, "vn"), rate(f"{prefix}link", f"vl{i}")


def running(pid: str) -> bool:
    """Alive and not a zombie (a killed process whose parent died waits for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def nothing_left(prefix: str) -> dict[str, list[str]]:
    return {k: v for k, v in leftovers(prefix).items() if v}


def test_fleet_limits_are_real_and_nothing_is_left(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = start(tmp_path, run_dir, probe=True)
    prefix = prefix_of(proc.pid)
    try:
        wait_for(lambda: (run_dir / "fleet.json").exists() or proc.poll() is not None, 2400, "the fleet to come up")
        assert proc.poll() is None, (tmp_path / "run.out").read_text()[-3000:]  # the runner itself failed: its reason
        seen = [kernel_limits(prefix, i) for i in range(2)]  # read while the fleet is up
        proc.wait(timeout=2400)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the runner's own teardown
            proc.wait(timeout=120)
    out = (tmp_path / "run.out").read_text()
    assert proc.returncode == 0, out[-3000:]
    assert seen == [e[1:] for e in EXPECTED]
    assert nothing_left(prefix) == {}
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rounds = [json.loads(line) for line in (run_dir / "fleet.jsonl").read_text().splitlines()]
    info = json.loads((run_dir / "fleet.json").read_text())
    assert [r["round"] for r in metrics] == [r["round"] for r in rounds] == [1, 2]
    assert [n["class"] for n in info["nodes"]] == [e[0] for e in EXPECTED]
    assert [r["slowest_class"] for r in rounds] != [] and all(len(r["nodes"]) == 2 for r in rounds)
    for r in rounds:  # every node sent its model up and got it down in every round, through its own link
        assert all(n["bytes_up"] > 0 and n["bytes_down"] > 0 and n["modelled_joules"] > 0 for n in r["nodes"]), r
    print()
    for node, (cls, *_rest, up, down) in zip(info["nodes"], EXPECTED, strict=True):
        p = node["probe"]
        print(f"{cls}: uplink {p['up_mbit_s']:.2f} of {up / 1e6:g} Mbit/s ({p['up_bytes']} B in {p['up_seconds']:.2f} s), "
              f"downlink {p['down_mbit_s']:.2f} of {down / 1e6:g} Mbit/s ({p['down_bytes']} B in {p['down_seconds']:.2f} s)")  # fmt: skip
    for r in rounds:
        per = ", ".join(f"{n['class']} {n['bytes_up']}/{n['bytes_down']} B up/down {n['modelled_joules']:.0f} J" for n in r["nodes"])
        print(f"round {r['round']}: {r['wall_seconds']:.1f} s, slowest {r['slowest_class']}; {per} (modelled)")


def test_killed_fleet_is_cleaned_by_fedapp_fleet_clean(tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    proc = start(tmp_path, run_dir, probe=False)
    prefix = prefix_of(proc.pid)
    try:
        node_cg = Path("/sys/fs/cgroup/cpu") / f"{prefix}n1" / "cgroup.procs"
        wait_for(lambda: (node_cg.exists() and node_cg.read_text().split()) or proc.poll() is not None, 2400, "SuperNode 1")
        assert proc.poll() is None, (tmp_path / "killed.out").read_text()[-3000:]
        before = nothing_left(prefix)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        time.sleep(1.0)
        after_kill = nothing_left(prefix)
    finally:
        cleaned = subprocess.run(
            [sys.executable, "-m", "fedapp", "fleet", "clean", str(proc.pid)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert len(before["namespaces"]) == 3 and len(before["cgroups"]) == 2 and before["processes"], before
    assert after_kill["namespaces"] == before["namespaces"] and after_kill["processes"], after_kill  # SIGKILL left them
    assert cleaned.returncode == 0, cleaned.stderr
    assert nothing_left(prefix) == {}
    assert not [p for p in after_kill["processes"] if running(p)]
    print(f"\nkilled fleet left {after_kill}; `fedapp fleet clean {proc.pid}`: {cleaned.stdout.strip()}")


def flower_process(pid: str) -> bool:
    """A Flower server-side or node-side process (flower-superlink, flower-supernode, flwr-clientapp, ...),
    not the wrapper that enters the image nor the operator's `flwr run`."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(Path(a.decode(errors="replace")).name.startswith(("flower-", "flwr-")) for a in argv[:2])


def roots_in(prefix: str) -> dict[str, set[str]]:
    """The root folders (``/proc/PID/root``) of the Flower processes in each fleet namespace."""
    out: dict[str, set[str]] = {}
    for ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split():
        if ns.startswith(prefix):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for p in filter(flower_process, pids):
                with contextlib.suppress(OSError):
                    out.setdefault(ns, set()).add(os.readlink(f"/proc/{p}/root"))
    return out


def test_fleet_from_built_images_runs_its_rounds_and_leaves_nothing(tmp_path: Path) -> None:
    """`--images`: the SuperLink and both SuperNodes (and the ClientApps they start) run chrooted in
    working containers of the images scripts/images.sh built; the run completes its rounds with the
    model the host installation gives (same seeds, same torch on both); no container is left."""
    if subprocess.run(["buildah", "inspect", f"fedapp-supernode:{TAG}"], capture_output=True).returncode != 0:
        pytest.skip(f"fedapp-supernode:{TAG} is not built (scripts/images.sh --make-base)")
    run_dir = tmp_path / "imaged"
    proc = start(tmp_path, run_dir, probe=False, images=TAG)
    prefix = prefix_of(proc.pid)
    roots: dict[str, set[str]] = {}
    try:  # sampled until the first ClientApp of each node has run: every process seen in each namespace
        while proc.poll() is None and not (run_dir / "metrics.jsonl").exists():
            for ns, seen in roots_in(prefix).items():
                roots.setdefault(ns, set()).update(seen)
            time.sleep(0.5)
        containers = subprocess.run(["buildah", "containers", "--format", "{{.ContainerName}}"], capture_output=True, text=True).stdout
        proc.wait(timeout=2400)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    out = (tmp_path / "imaged.out").read_text()
    assert proc.returncode == 0, out[-3000:]
    mine = sorted(c for c in containers.split() if c.startswith(prefix))
    assert mine == [f"{prefix}link-img", f"{prefix}n0-img", f"{prefix}n1-img"], containers
    for i in range(2):  # a SuperNode and what it starts see only its own image as /
        node_roots = roots.get(f"{prefix}n{i}", set())
        assert len(node_roots) == 1 and "/" not in node_roots and "overlay" in next(iter(node_roots)), roots
    assert roots[f"{prefix}n0"] != roots[f"{prefix}n1"]  # one working container per device
    link_roots = roots.get(f"{prefix}link", set())  # the SuperLink's (the operator's flwr run stays on the host)
    assert len(link_roots) == 1 and "overlay" in next(iter(link_roots)) and link_roots != roots[f"{prefix}n0"], roots
    assert nothing_left(prefix) == {}  # containers included
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in metrics] == [1, 2] and all(r["clients"] == 2 and r["failures"] == 0 for r in metrics)
    here = tmp_path / "in-process"  # the same federation on this installation, in one process
    subprocess.run([sys.executable, "-m", "fedapp", "run", "--no-progress", f"{RUN} num-clients=2 run-dir='{here}'"], cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, capture_output=True, timeout=600)  # fmt: skip
    with np.load(run_dir / "model.npz") as a, np.load(here / "model.npz") as b:
        assert sorted(a.files) == sorted(b.files) and all(np.array_equal(a[k], b[k]) for k in a.files)
    print(f"\nfrom images {TAG}: " + "; ".join(f"round {r['round']} accuracy {r['accuracy']:.4f} loss {r['loss']:.4f}" for r in metrics))
