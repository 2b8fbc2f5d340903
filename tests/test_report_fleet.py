"""`fedapp report --fleet` on a hand-written fleet run: seconds and modelled joules to the
target, MB per node, straggler share, all computed by hand below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedapp.report.fleet import fleet_plot, fleet_table, summary


def node(i: int, cls: str, up: int, down: int, t90: float, joules: float) -> dict[str, object]:
    return {"node": i, "class": cls, "bytes_up": up, "bytes_down": down, "cpu_seconds": 1.0, "upload_90_s": t90, "modelled_joules": joules}


def write_run(tmp: Path) -> Path:
    run = tmp / "fedavg"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "fedavg"}))
    rows = [  # three nodes: the slow one is the straggler in both rounds
        {"round": 1, "wall_seconds": 40.0, "accuracy": 0.5, "modelled_joules": 100.0, "slowest_class": "slow",
         "nodes": [node(0, "fast", 1_000_000, 2_000_000, 10.0, 50.0), node(1, "mid", 1_000_000, 2_000_000, 20.0, 30.0),
                   node(2, "slow", 1_000_000, 2_000_000, 40.0, 20.0)]},
        {"round": 2, "wall_seconds": 20.0, "accuracy": 0.85, "modelled_joules": 60.0, "slowest_class": "slow",
         "nodes": [node(0, "fast", 500_000, 500_000, 5.0, 30.0), node(1, "mid", 500_000, 500_000, 5.0, 20.0),
                   node(2, "slow", 500_000, 500_000, 15.0, 10.0)]},
    ]  # fmt: skip
    (run / "fleet.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_summary_by_hand(tmp_path: Path) -> None:
    run = write_run(tmp_path)
    s = summary(run, 0.8)
    assert s["to_target"] == (2, 60.0, 160.0)  # reached in round 2: 40 + 20 s, 100 + 60 modelled J
    assert s["mb_per_node"] == pytest.approx(4.0)  # (3 MB + 1 MB) per node
    # straggler share: round 1 (40 - median 20) / 40 = 0.5, round 2 (15 - 5) / 20 = 0.5
    assert s["straggler_share"] == pytest.approx(0.5)
    assert s["slowest"] == "slow (2/2)"
    assert summary(run, 0.9)["to_target"] is None  # never reached


def test_table_and_plot(tmp_path: Path) -> None:
    run = write_run(tmp_path)
    md = fleet_table([run], 0.8)
    assert "| fedavg | fedavg | 2 | 85.0 | 85.0 | 2 | 60 | 160 | 60 | 160 | 4.00 | 50% | slow (2/2) |" in md
    assert fleet_plot([run], tmp_path / "out", 0.8).stat().st_size > 0


def test_a_run_without_fleet_rows_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="fedapp fleet run"):
        summary(tmp_path, 0.8)
