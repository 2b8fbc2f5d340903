"""Integration: FedPeWS through `flwr run` (Flower's simulation engine, Ray), warmup on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flwr_harness import flwr_run
from tests.test_fedpews_run import BASE, dense_upload

pytestmark = pytest.mark.flwr


def test_flwr_run_fedpews_three_rounds_with_warmup(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = flwr_run(tmp_path, {**BASE, "method": "fedpews", "diversity-weight": 1.0, "run-dir": str(run_dir)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert [r["warmup"] for r in rows] == [True, True, False]  # W = round(0.5 * 3) = 2
    for r in rows:
        assert r["clients"] == 2 and r["failures"] == 0
    for r in rows[:2]:
        assert 0 < r["mask_density"] < 1 and 0 <= r["mask_overlap"] <= 1
        assert 0 < r["bytes_up"] < 2 * dense_upload() and r["coverage"] < 1.0
    assert rows[2]["bytes_up"] == 2 * dense_upload() and rows[2]["coverage"] == 1.0
    assert "mask_density" not in rows[2]
