"""engine-workers: the whole Ray cluster ends mid-round (every Ray process the run started is killed:
GCS, raylet, workers; the workers, before, are checked to run at the driver's priority). The run
stops at once with one line in failure.json, keeps round 1's
checkpoint, and ``resume = true`` (a new local Ray) finishes it with the rows and model of an
uninterrupted one-process run. Real Ray throughout; the driver runs in a subprocess because Ray
ends a driver that cannot reach its GCS for 60 s."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedapp.server import checkpoint
from fedapp.sim.run_local import run_local
from tests.deploy_harness import cmdline, descendants
from tests.flwr_harness import ROOT
from tests.run_rows import WIRE, outcome_rows

pytestmark = pytest.mark.slow  # about 60 s: three Ray starts (the killed run, the resume) and the kill's detection

CFG = {
    "dataset": "digits", "partition": "iid", "num-clients": 4, "num-server-rounds": 3, "local-steps": 4, "batch-size": 16,
    "mlp-hidden": "32", "engine-workers": 2,
}  # fmt: skip
LINE = (
    "EngineWorkersLost: engine-workers: the Ray cluster is gone (its GCS at {} refuses connections), and every worker with it; "
    "resume = true continues from the last checkpointed round"
)


def model_of(run: Path) -> dict[str, np.ndarray]:
    with np.load(run / "model.npz") as f:
        return {k: f[k] for k in f.files}


def niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def kill_ray_mid_round(run: Path, marker: Path) -> tuple[int, str]:
    """Start the run, wait for round 2's held message, kill every process below the driver; the driver's exit code and output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "tests.held_round", json.dumps({**CFG, "run-dir": str(run)}), "2", str(marker)]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    ray_pids: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled before round 2"
            time.sleep(0.2)
        ray_pids = descendants(proc.pid)  # the local Ray the driver started
        assert len(ray_pids) >= 4  # GCS, raylet, two workers at least
        workers = [pid for pid in ray_pids if cmdline(pid).startswith("ray::EngineWorker")]
        assert len(workers) == 2 and {niceness(pid) for pid in workers} == {niceness(proc.pid)}  # not Ray's default, 15 lower
        for pid in ray_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
        return proc.returncode, out.decode(errors="replace")
    finally:
        for pid in [proc.pid, *ray_pids, *descendants(proc.pid)] if proc.returncode is None else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_the_ray_cluster_gone_mid_round_stops_the_run_with_one_line_and_resume_finishes_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, out = kill_ray_mid_round(run, tmp_path / "round-2-held")
    failure = json.loads((run / "failure.json").read_text())
    gcs = failure["reason"].split("GCS at ", 1)[-1].split(" ", 1)[0]
    assert code != 0 and failure["stage"] == "rounds"
    assert failure["reason"] == LINE.format(gcs), out[-3000:]
    ckpt = checkpoint.load(run)
    assert ckpt is not None and ckpt.round == 1 and len(outcome_rows(run)) == 1  # round 2 was not recorded as failed clients

    run_local({**CFG, "run-dir": str(run), "resume": True})  # a new local Ray
    one = run_local({**CFG, "engine-workers": 1, "run-dir": str(tmp_path / "one")})
    rows = outcome_rows(run, skip=WIRE)
    assert [sorted(r.pop("engine_workers")) for r in rows] == [["0", "1", "2", "3"]] * 3
    assert rows == outcome_rows(one, skip=WIRE)
    got, want = model_of(run), model_of(one)
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
