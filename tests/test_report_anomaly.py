"""`fedapp report` names each run's most anomalous client (rows' ``anomaly`` scores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fedapp.cli import main
from fedapp.report.anomaly import most_anomalous


def write_run(path: Path, config: dict[str, Any], rows: list[dict[str, Any]]) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS = [
    {"round": 1, "accuracy": 0.3, "failed_pids": [3], "anomaly": {
        "0": {"norm_ratio": 1.0, "cosine": 0.9, "clip": 0.5}, "1": {"norm_ratio": 9.0, "cosine": -0.8, "clip": 0.2},
        "2": {"norm_ratio": 0.5, "cosine": 0.7}}},
    {"round": 2, "accuracy": 0.4, "failed_pids": [3], "anomaly": {
        "0": {"norm_ratio": 3.0, "cosine": 0.1}, "1": {"norm_ratio": 5.0, "cosine": -0.6}, "2": {"norm_ratio": 1.0, "cosine": 0.9}}},
]  # fmt: skip


def test_most_anomalous_is_the_largest_mean_norm_ratio_with_its_means() -> None:
    pid, s = most_anomalous(ROWS) or ("", {})
    # client 1: norm ratios 9 and 5 -> 7 (client 0: 2); cosine (-0.8 - 0.6)/2; clipped 0.2 in round 1, not in round 2 (1)
    assert pid == "1"
    assert s == {"rounds": 2, "norm_ratio": 7.0, "cosine": -0.7, "clip": 0.6}
    assert most_anomalous([{"round": 1, "accuracy": 0.1}]) is None
    split = [  # client 0 steps furthest, client 2 points against the aggregate
        {"round": 1, "anomaly": {"0": {"norm_ratio": 4.0, "cosine": 0.9}, "2": {"norm_ratio": 1.0, "cosine": -0.5}}},
        {"round": 2, "anomaly": {"0": {"norm_ratio": 2.0, "cosine": 0.5}, "2": {"norm_ratio": 1.0, "cosine": -0.9}}},
    ]
    assert most_anomalous(split) == ("0", {"rounds": 2, "norm_ratio": 3.0, "cosine": pytest.approx(0.7)})
    assert most_anomalous(split, lowest_cosine=True) == ("2", {"rounds": 2, "norm_ratio": 1.0, "cosine": pytest.approx(-0.7)})
    assert most_anomalous(ROWS, lowest_cosine=True) == ("1", {"rounds": 2, "norm_ratio": 7.0, "cosine": -0.7, "clip": 0.6})


def test_report_shows_the_section_only_for_runs_with_scores(tmp_path: Path) -> None:
    scored = write_run(tmp_path / "nb", {"method": "fedavg", "seed": 0, "aggregation": "norm-bound"}, ROWS)
    plain = write_run(tmp_path / "old", {"method": "fedavg", "seed": 1}, [{"round": 1, "accuracy": 0.2}])
    assert main(["report", str(scored), str(plain), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| nb | norm-bound | 1 | 2 | 7.000 | -0.700 | — | 0.600 | 1 (-0.700) | 3 (2) |" in md
    assert "| old |" not in md.split("Most anomalous client per run:")[1].split("\n\n")[1]
    assert main(["report", str(plain), "--out", str(tmp_path / "rep2")]) == 0
    assert "Most anomalous" not in (tmp_path / "rep2" / "report.md").read_text()
