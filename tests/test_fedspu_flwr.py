"""Integration: FedSPU with early stopping under `flwr run` (Ray simulation) ends when
every client has stopped, logs the pool each round, and matches the in-process engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedapp.sim.run_local import run_local
from tests.flwr_harness import assert_completed, flwr_run

pytestmark = pytest.mark.flwr

CONFIG: dict[str, object] = {
    "method": "fedspu", "early-stopping": True, "num-clients": 2, "partition": "0,1,2,3,4|5,6,7,8,9",
    "local-test-fraction": 0.3, "mlp-hidden": "32,16", "tiers": "0.5,1.0", "fraction-train": 1.0,
    "num-server-rounds": 10, "local-epochs": 2, "lr": 0.5, "state-store": "disk",
}  # fmt: skip


def rows(run_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_flwr_run_fedspu_early_stopping(tmp_path: Path) -> None:
    proc = flwr_run(tmp_path, {**CONFIG, "run-dir": str(tmp_path / "flwr")}, num_supernodes=2)
    assert_completed(proc, tmp_path / "flwr")
    got = rows(tmp_path / "flwr")
    assert len(got) < 10 and got[-1]["active_clients"] == 0 and got[-1]["stopped_clients"] == 2  # ended early: all stopped
    pool = 2
    for r in got:
        assert r["clients"] == pool and r["failures"] == 0  # a stopped client is never asked to train again
        assert r["active_clients"] + r["stopped_clients"] == 2 and r["active_clients"] <= pool  # type: ignore[operator]
        assert len(r["train_seconds"]) == r["clients"] and r["evaluated_clients"] == 2  # type: ignore[arg-type]
        pool = r["active_clients"]  # type: ignore[assignment]
    assert sum(1 for r in got if "es_round_code" in r) == 1
    # the same run in-process gives the same numbers (state store, seeds and selection agree)
    local = rows(run_local({**CONFIG, "run-dir": str(tmp_path / "local")}))
    keys = ("clients", "active_clients", "personalized_accuracy", "accuracy")
    assert [[r[k] for k in keys] for r in got] == [[r[k] for k in keys] for r in local]
