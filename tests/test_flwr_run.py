"""Integration: `flwr run` (Flower's simulation engine with Ray) end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flwr_harness import flwr_run

pytestmark = pytest.mark.flwr


def test_flwr_run_three_rounds_writes_metrics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = flwr_run(tmp_path, {"num-server-rounds": 3, "run-dir": str(run_dir), "num-clients": 2, "partition": "0,2,4,6,8|1,3,5,7,9"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["clients"] == 2 and r["failures"] == 0 and r["coverage"] == 1.0
        assert r["bytes_up"] > 0 and r["bytes_down"] > 0 and r["seconds"] > 0
        assert set(r) >= {"round", "accuracy", "loss", "clients", "failures", "bytes_up", "bytes_down", "coverage", "seconds"}
        assert set(r["client_train_s"]) == {"0", "1"} and all(w >= 0 for w in r["client_wait_s"].values())  # energy ledger
    assert rows[-1]["accuracy"] > rows[0]["accuracy"] - 0.05
    assert set(json.loads((run_dir / "meters.json").read_text())) == {"0", "1"}
    assert json.loads((run_dir / "config.json").read_text())["num-server-rounds"] == 3
    assert (run_dir / "model.npz").exists()


def test_flwr_run_rejects_a_bad_value_naming_the_key(tmp_path: Path) -> None:
    """Through the real runtime once; every bad-value case is covered fast in test_config.py."""
    run_dir = tmp_path / "run"
    proc = flwr_run(tmp_path, {"num-server-rounds": 3, "run-dir": str(run_dir), "lr": -0.1}, timeout=300)
    out = proc.stdout + proc.stderr
    assert "run-config key 'lr' = -0.1 is not allowed: expected a number > 0" in out, out[-3000:]
    assert not (run_dir / "metrics.jsonl").exists()
