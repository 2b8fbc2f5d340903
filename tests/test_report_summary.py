"""summary.csv / summary.json hold the report table's numbers: each table cell, parsed back from
report.md, equals the CSV's mean/std to the digits shown; each seed row equals numbers computed
here from the curves written; figures come as PNG, PDF and SVG, with small multiples for many groups."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedapp.report.compare import report
from fedapp.report.plot import SMALL_MULTIPLES_FROM

TARGET = 0.8


def write_run(folder: Path, config: dict[str, Any], accs: list[float]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    rows = [{"round": r + 1, "accuracy": a, "bytes_up": 1000 * (r + 7), "bytes_down": 333 * (r + 1)} for r, a in enumerate(accs)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def number_pair(cell: str) -> tuple[float, float | None]:
    """``81.23 ± 2.10`` -> (81.23, 2.10); ``13`` -> (13, None)."""
    parts = [float(p) for p in cell.split(" ± ")]
    return parts[0], parts[1] if len(parts) > 1 else None


def table_rows(md: str) -> dict[str, list[str]]:
    """The first markdown table of report.md: group name -> its cells."""
    lines = [line for line in md.split("\n\n", 1)[0].splitlines() if line.startswith("| ") and not line.startswith("| run ")]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)}


def close(table: tuple[float, float | None], mean: str, std: str, digits: int) -> None:
    tol = 0.5 * 10**-digits + 1e-9
    assert abs(table[0] - float(mean)) <= tol
    assert (table[1] is None) == (std == "")  # one value: no std in either
    if table[1] is not None:
        assert abs(table[1] - float(std)) <= tol


@pytest.fixture
def curves() -> dict[str, list[list[float]]]:
    rng = np.random.default_rng(3)
    return {
        "all-reach": [np.clip(np.linspace(0.3, 0.95, 12) + rng.normal(0, 0.03, 12), 0, 1).tolist() for _ in range(3)],
        "one-reaches": [[0.5, 0.7, 0.85, 0.6], [0.5, 0.6, 0.7, 0.75], [0.4, 0.5, 0.6, 0.7]],
        "none-reaches": [[0.3, 0.4, 0.5], [0.2, 0.45, 0.55]],
        "two-of-three": [[0.5, 0.81, 0.9], [0.7, 0.75, 0.82], [0.1, 0.2, 0.3]],
    }


def make_runs(tmp_path: Path, curves: dict[str, list[list[float]]]) -> list[Path]:
    return [
        write_run(tmp_path / "runs" / f"{name}-seed{s}", {"method": "fedavg", "lr": i / 10, "seed": s}, c)
        for i, (name, seeds) in enumerate(curves.items())
        for s, c in enumerate(seeds)
    ]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_summary_csv_equals_the_table_in_report_md(tmp_path: Path, curves: dict[str, list[list[float]]]) -> None:
    report(make_runs(tmp_path, curves), tmp_path / "out", target=TARGET)
    table = table_rows((tmp_path / "out" / "report.md").read_text())
    rows = read_csv(tmp_path / "out" / "summary.csv")
    assert list(table) == list(curves) and {r["group"] for r in rows} == set(curves)
    for name, cells in table.items():
        mean = next(r for r in rows if r["group"] == name and r["stat"] == "mean")
        std = next(r for r in rows if r["group"] == name and r["stat"] == "std")
        method, seeds, final, best, rounds, up, down = cells
        assert method == mean["method"] and int(seeds) == int(mean["seeds"]) == len(curves[name])
        close(number_pair(final), mean["final_accuracy_pct"], std["final_accuracy_pct"], 2)
        close(number_pair(best), mean["best_accuracy_pct"], std["best_accuracy_pct"], 2)
        close(number_pair(up), mean["mb_up"], std["mb_up"], 3)
        close(number_pair(down), mean["mb_down"], std["mb_down"], 3)
        reached = int(mean["reached"])
        if rounds == "×":
            assert reached == 0 and mean["rounds_to_target"] == ""
        elif m := re.fullmatch(r"NA \((\d+)\)", rounds):
            assert reached == 1 and float(mean["rounds_to_target"]) == int(m.group(1)) and std["rounds_to_target"] == ""
        else:
            m = re.fullmatch(r"(.+?)(?: \((\d+)/(\d+)\))?", rounds)
            assert m is not None
            assert reached == (int(m.group(2)) if m.group(2) else int(seeds))
            close(number_pair(m.group(1)), mean["rounds_to_target"], std["rounds_to_target"], 1)


def test_seed_rows_are_each_runs_own_numbers(tmp_path: Path, curves: dict[str, list[list[float]]]) -> None:
    report(make_runs(tmp_path, curves), tmp_path / "out", target=TARGET)
    rows = [r for r in read_csv(tmp_path / "out" / "summary.csv") if r["stat"] == "seed"]
    assert len(rows) == sum(len(s) for s in curves.values())
    for row in rows:
        c = np.array(curves[row["group"]][int(row["seed"])])
        n = np.arange(1, len(c) + 1)
        assert row["run"] == f"{row['group']}-seed{row['seed']}"
        assert float(row["final_accuracy_pct"]) == pytest.approx(c[-1] * 100, abs=1e-9)
        assert float(row["best_accuracy_pct"]) == pytest.approx(c.max() * 100, abs=1e-9)
        assert float(row["mb_up"]) == pytest.approx(1000 * (n + 6).sum() / 1e6, abs=1e-12)
        assert float(row["mb_down"]) == pytest.approx(333 * n.sum() / 1e6, abs=1e-12)
        hit = np.flatnonzero(c >= TARGET)
        assert row["rounds_to_target"] == (str(hit[0] + 1) if hit.size else "")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["metric"] == "accuracy"
    by_run = {run["run"]: run for g in summary["groups"] for run in g["runs"]}
    for row in rows:  # the JSON holds the same numbers
        assert by_run[row["run"]]["final_accuracy_pct"] == pytest.approx(float(row["final_accuracy_pct"]), abs=1e-12)


def test_figures_as_png_pdf_svg_and_small_multiples_for_many_groups(tmp_path: Path) -> None:
    few = [write_run(tmp_path / "few" / f"g{i}", {"lr": i, "seed": 0}, [0.1 * i, 0.2]) for i in range(2)]
    report(few, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").glob("accuracy*")) == ["accuracy.pdf", "accuracy.png", "accuracy.svg"]
    assert (tmp_path / "a" / "accuracy.pdf").read_bytes().startswith(b"%PDF") and b"<svg" in (tmp_path / "a" / "accuracy.svg").read_bytes()
    many = [write_run(tmp_path / "many" / f"g{i}", {"lr": i, "seed": 0}, [0.05 * i, 0.5]) for i in range(SMALL_MULTIPLES_FROM + 1)]
    report(many, tmp_path / "a")
    assert {p.name for p in (tmp_path / "a").glob("accuracy-groups.*")} == {f"accuracy-groups.{x}" for x in ("png", "pdf", "svg")}
    assert "](accuracy-groups.png)" in (tmp_path / "a" / "report.md").read_text()
    report(few, tmp_path / "a")  # a later report with few groups leaves no stale panels behind
    assert not list((tmp_path / "a").glob("accuracy-groups.*"))
