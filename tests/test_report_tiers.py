"""`fedapp report --tiers`: client-rounds saved, code ES round and train seconds by p,
from hand-made run folders."""

from __future__ import annotations

import json
from pathlib import Path

from fedapp.report.compare import load_runs, tier_table


def write_run(path: Path, seed: int, rows: list[dict[str, object]]) -> Path:
    path.mkdir(parents=True)
    config = {"method": "fedspu", "seed": seed, "num-server-rounds": 4, "fraction-train": 0.5, "num-clients": 4, "run-dir": str(path)}
    (path / "config.json").write_text(json.dumps(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(rnd: int, acc: float, seconds: dict[str, float], fractions: dict[str, float], **extra: object) -> dict[str, object]:
    return {
        "round": rnd,
        "personalized_accuracy": acc,
        "clients": len(seconds),
        "train_seconds": seconds,
        "client_active_fraction": fractions,
        **extra,
    }


def test_tier_table_counts_client_rounds_and_medians(tmp_path: Path) -> None:
    # T x K = 4 x 2 = 8 client-rounds budget; seed 0 trains 2 + 2 + 1 = 5 (saved 3/8), seed 1 trains 2 + 1 = 3 (saved 5/8)
    a = write_run(tmp_path / "x-seed0", 0, [
        row(1, 0.5, {"0": 9.0, "1": 9.0}, {"0": 0.5, "1": 1.0}),  # round 1 is warm-up: left out of the medians
        row(2, 0.6, {"0": 1.0, "2": 4.0}, {"0": 0.5, "2": 1.0}),
        row(3, 0.7, {"0": 3.0}, {"0": 0.5}, es_round_code=3),
    ])  # fmt: skip
    b = write_run(tmp_path / "x-seed1", 1, [
        row(1, 0.4, {"1": 9.0, "3": 9.0}, {"1": 1.0, "3": 1.0}),
        row(2, 0.9, {"3": 2.0}, {"3": 1.0}, es_round_code=2),
    ])  # fmt: skip
    lines = tier_table(load_runs([a, b])).splitlines()
    assert lines[0].endswith("| train s, p=0.5 | train s, p=1 |")
    cells = [c.strip() for c in lines[2].split("|")[1:-1]]
    assert cells[:4] == ["x", "fedspu", "2", "80.00 ± 14.14"]  # final accuracies 0.7 and 0.9
    assert cells[4:8] == ["2.5 ± 0.7", "4 ± 1.4", "50.0 ± 17.7 %", "2.5 ± 0.7 (80.00 ± 14.14)"]
    assert cells[8:] == ["2.0000", "3.0000"]  # p = 0.5: median(1, 3); p = 1: median(4, 2)
