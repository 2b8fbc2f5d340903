"""`fedapp fleet run` for real (root, Linux): two nodes of two classes, two rounds of digits.
While it runs, the HTB classes and cgroup limits are read from the kernel and compared with
the profile; afterwards the run's rows, the link probe's rates (printed, not asserted: no
timing asserts) and that nothing of the fleet is left. A second fleet is SIGKILLed mid-run:
its namespaces, cgroups and processes stay until `fedapp fleet clean PID`, then are gone.
Slow (minutes on 2 shared cores: each message starts a ClientApp process under its quota):
  pytest -n 0 -q -m slow tests/test_fleet.py -s
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedapp.fleet.clean import leftovers, prefix_of
from fedapp.fleet.runner import unavailable

pytestmark = [pytest.mark.flwr, pytest.mark.slow, pytest.mark.skipif((why := unavailable()) is not None, reason=str(why))]
ROOT = Path(__file__).resolve().parents[1]
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


def start(tmp: Path, run_dir: Path, probe: bool) -> subprocess.Popen[str]:
    (tmp / "profile.toml").write_text(PROFILE)
    argv = [sys.executable, "-m", "fedapp", "fleet", "run", str(tmp / "profile.toml"), f"{RUN} run-dir='{run_dir}'"]
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
