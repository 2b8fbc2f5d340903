"""`fedapp report --per-seed` and `--warmup` on hand-made run folders: cells equal values
computed by hand from the rows, and same-named groups in different folders stay apart."""

from __future__ import annotations

import json
from pathlib import Path

from fedapp.report.compare import group_runs, load_runs, report
from fedapp.report.sections import per_seed_table, warmup_table


def write_run(path: Path, method: str, seed: int, rows: list[dict[str, object]], **config: object) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"method": method, "seed": seed, "run-dir": str(path), **config}))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def acc_rows(accs: list[float]) -> list[dict[str, object]]:
    return [{"round": i + 1, "accuracy": a, "bytes_up": 100, "bytes_down": 100} for i, a in enumerate(accs)]


def test_per_seed_pairs_groups_by_seed(tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path / "avg-seed0", "fedavg", 0, acc_rows([0.5, 0.95, 0.97])),
        write_run(tmp_path / "avg-seed1", "fedavg", 1, acc_rows([0.5, 0.6, 0.8])),
        write_run(tmp_path / "pews-seed1", "fedpews", 1, acc_rows([0.9, 0.91, 0.925])),
    ]
    md = per_seed_table(group_runs(load_runs(runs)), target=0.9)
    assert "| run | seed 0 | seed 1 | paired Δ vs avg (points) |" in md
    assert "| avg | 97.00 (2) | 80.00 | — |" in md  # first round >= 90 % is round 2; never reached: no parentheses
    assert "| pews | — | 92.50 (1) | +12.50 (1 seeds) |" in md  # paired on seed 1 only: 92.5 - 80


def test_warmup_table_splits_bytes_by_phase(tmp_path: Path) -> None:
    def rows(seed: int) -> list[dict[str, object]]:
        last = 0.5 + seed / 10
        return [
            {"round": 1, "accuracy": 0.3, "bytes_up": 40, "bytes_down": 9, "warmup": True, "mask_density": 0.4, "mask_overlap": 0.2},
            {"round": 2, "accuracy": 0.4, "bytes_up": 60, "bytes_down": 9, "warmup": True, "mask_density": last, "mask_overlap": 0.1},
            {"round": 3, "accuracy": 0.5, "bytes_up": 120, "bytes_down": 9, "warmup": False},
        ]  # fmt: skip

    runs = [write_run(tmp_path / f"p-seed{s}", "fedpews", s, rows(s)) for s in (0, 1)]
    runs.append(write_run(tmp_path / "a-seed0", "fedavg", 0, acc_rows([0.5, 0.6])))
    md = warmup_table(group_runs(load_runs(runs)))
    # 2 warmup rounds per run, mean warmup bytes (40 + 60) / 2, last-round density (0.5 + 0.6) / 2
    assert "| p | 2 | 2 | 50 | 0.550 | 0.100 | 120 |" in md
    assert "| a | 1 | 0 | — | — | — | 100 |" in md


def test_same_names_in_different_folders_are_different_groups(tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path / "n2" / "fedavg-seed0", "fedavg", 0, acc_rows([0.5]), lr=0.1),
        write_run(tmp_path / "e5" / "fedavg-seed0", "fedavg", 0, acc_rows([0.7]), lr=0.01),
    ]
    md, _ = report(runs, tmp_path / "out", target=0.9, per_seed=True)
    assert "| n2/fedavg | fedavg | 1 | 50.00 |" in md and "| e5/fedavg | fedavg | 1 | 70.00 |" in md
    assert "| n2/fedavg | 50.00 | — |" in md and "| e5/fedavg | 70.00 | +20.00 (1 seeds) |" in md


def test_mixed_targets_use_each_groups_own_target(tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path / "a-seed0", "fedavg", 0, acc_rows([0.5, 0.8, 0.95]), **{"target-accuracy": 0.9}),
        write_run(tmp_path / "b-seed0", "fedavg", 0, acc_rows([0.5, 0.8, 0.95]), **{"target-accuracy": 0.75}),
    ]
    md, _ = report(runs, tmp_path / "out", per_seed=True)
    assert "rounds to target" in md
    assert "| a | fedavg | 1 | 95.00 | 95.00 | 3 @ 90% |" in md and "| b | fedavg | 1 | 95.00 | 95.00 | 2 @ 75% |" in md
    assert "| a | 95.00 (3) | — |" in md and "| b | 95.00 (2) | +0.00 (1 seeds) |" in md
    one, _ = report(runs[:1], tmp_path / "one")
    assert "rounds to 90%" in one and "| 3 |" in one
