"""run-config tensorboard = true: every number of each metrics row reaches TensorBoard at
step = round (read back with TensorBoard's own event reader; the dev extra installs tensorboard,
so this runs wherever the tests do); without the package the run stops before round 1 with
one line naming the key and the fix, and writes no rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedapp.sim.run_local import run_local

ROOT = Path(__file__).resolve().parents[1]
RUN = {"num-clients": 2, "num-server-rounds": 2, "tensorboard": True}


def test_metrics_rows_reach_tensorboard_unchanged(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = run_local({**RUN, "run-dir": str(tmp_path / "run")})
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    numbers = {k for k, v in rows[0].items() if k != "round" and isinstance(v, int | float) and not isinstance(v, bool)}
    assert {"accuracy", "loss", "bytes_up", "seconds"} <= numbers and tags == numbers
    for tag in ("accuracy", "loss", "bytes_up"):
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        assert got == [(r["round"], pytest.approx(r[tag], rel=1e-6)) for r in rows]  # stored as float32


def test_without_the_package_the_run_stops_before_round_one(tmp_path: Path) -> None:
    code = f"""
import sys
sys.modules["tensorboard"] = None  # as if it were not installed
from fedapp.cli import main
sys.exit(main(["run", "--no-progress", "num-clients=2 num-server-rounds=2 tensorboard=true run-dir='{tmp_path / "run"}'"]))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "fedapp: error: run-config key 'tensorboard' = true needs the tensorboard package, which is not installed: "
        "pip install tensorboard (or pip install -e '.[tensorboard]')"
    )
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
