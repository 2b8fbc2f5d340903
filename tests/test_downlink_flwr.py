"""Integration: ``downlink = selected`` through `flwr run` (Flower's simulation engine with Ray): the
partial messages are serialized for real and each node's model cache lives in its Context.state."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.flwr_harness import assert_completed, flwr_run
from tests.test_fedpart_flwr import GROUPS

pytestmark = pytest.mark.flwr


def test_flwr_run_selected_downlink_sends_changed_groups_with_no_cache_miss(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = {
        "method": "fedpart", "model": "cnn-bn", "dataset": "digits", "partition": "iid", "num-clients": 2,
        "optimizer": "adam", "lr": 0.001, "local-steps": 2, "warmup-rounds": 1, "cycles": 1, "rounds-per-layer": 1,
        "full-rounds-between-cycles": 0, "num-server-rounds": 7, "run-dir": str(run_dir), "downlink": "selected",
    }  # fmt: skip
    proc = flwr_run(tmp_path, config)
    assert_completed(proc, run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    params = {k: v for g in GROUPS for k, v in g.items()}
    assert rows[0]["downlink"]["full"] == {"0": "no model sent yet", "1": "no model sent yet"}
    for prev, r in itertools.pairwise(rows):
        assert r["downlink"] == {"full": {}, "catch_up": {}, "cache_miss": {}}, r["round"]
        assert r["clients"] == 2 and r["failures"] == 0
        sent = params if prev["trained_group"] == -1 else GROUPS[prev["trained_group"]]
        # two nodes, each sent the previous round's group: 4 bytes per value, a 128-byte .npy header and the key per tensor
        assert r["bytes_down"] == 2 * sum(4 * n + 128 + len(k) for k, n in sent.items()), r["round"]
