"""Integration: FedSelect through `flwr run` (Ray simulation, real SuperLink)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedapp.server.checkpoint import client_state_dir
from tests.flwr_harness import assert_completed, flwr_run

pytestmark = pytest.mark.flwr


def test_flwr_run_fedselect_personalized_accuracy_and_shrinking_uploads(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = {
        "method": "fedselect", "num-server-rounds": 3, "num-clients": 5, "partition": "shard", "classes-per-client": 2,
        "samples-per-client": 10, "batch-size": 10, "local-alt-epochs": 1, "state-store": "disk", "run-dir": str(run_dir),
    }  # fmt: skip
    proc = flwr_run(tmp_path, config, num_supernodes=5)
    assert_completed(proc, run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["clients"] == 5 and r["failures"] == 0 and r["evaluated_clients"] == 5
        assert 0 < r["personalized_accuracy_min"] <= r["personalized_accuracy"] <= r["personalized_accuracy_max"] <= 1
    # masks grow 0 -> 25 % -> 30 % (capped): uploads shrink every round
    assert [round(r["personal_fraction"], 2) for r in rows] == [0.0, 0.25, 0.3]
    assert rows[0]["bytes_up"] > rows[1]["bytes_up"] > rows[2]["bytes_up"]
    # each client's state of its last round and the version before it (what a resume after a kill reads back)
    assert sorted(p.name for p in client_state_dir(run_dir).iterdir()) == sorted(
        f"client-{p}{v}.npz" for p in range(5) for v in ("", ".prev")
    )
