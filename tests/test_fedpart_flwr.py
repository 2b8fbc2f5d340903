"""Integration: FedPart through `flwr run` (Flower's simulation engine with Ray), tiny schedule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.flwr_harness import assert_completed, flwr_run

pytestmark = pytest.mark.flwr

# cnn-bn on 1x8x8 digits: the six groups' parameter tensors (spec §7.1) and their sizes
GROUPS = [
    {"0.weight": 144, "1.weight": 16, "1.bias": 16},
    {"3.weight": 2304, "4.weight": 16, "4.bias": 16},
    {"6.weight": 4608, "7.weight": 32, "7.bias": 32},
    {"9.weight": 9216, "10.weight": 32, "10.bias": 32},
    {"12.weight": 18432, "13.weight": 64, "13.bias": 64},
    {"17.weight": 640, "17.bias": 10},
]


def test_flwr_run_fedpart_trains_and_uploads_one_group_per_round(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = {
        "method": "fedpart", "model": "cnn-bn", "dataset": "digits", "partition": "iid", "num-clients": 2,
        "optimizer": "adam", "lr": 0.001, "local-steps": 2, "warmup-rounds": 1, "cycles": 1, "rounds-per-layer": 1,
        "full-rounds-between-cycles": 0, "num-server-rounds": 7, "run-dir": str(run_dir),
    }  # fmt: skip
    proc = flwr_run(tmp_path, config)
    assert_completed(proc, run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["trained_group"] for r in rows] == [-1, 0, 1, 2, 3, 4, 5]
    everything = {k: v for g in GROUPS for k, v in g.items()}
    for r in rows:
        tensors = everything if r["trained_group"] == -1 else GROUPS[r["trained_group"]]
        # two clients, 4 bytes per parameter, plus a 128-byte .npy header and the key per tensor
        assert r["bytes_up"] == 2 * sum(4 * n + 128 + len(k) for k, n in tensors.items()), r
        assert r["clients"] == 2 and r["failures"] == 0 and r["bytes_up_eval"] > 0
        assert set(r["train_seconds"]) == {"0", "1"}
    # the evaluated (and saved) model carries partition 0's own BN statistics, kept in its Context.state
    # across the 7 rounds: 2 steps per round in every BN layer, frozen or not
    with np.load(run_dir / "model.npz") as saved:
        assert all(int(saved[f"{i}.num_batches_tracked"].item()) == 14 for i in (1, 4, 7, 10, 13))
        assert not np.allclose(saved["1.running_var"], 1.0)
