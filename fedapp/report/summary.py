"""The report table's numbers, machine-readable (``summary.csv``, ``summary.json``), so a paper's
own tables and plots start from the values, not from parsing markdown.

Per group: a ``mean`` and a ``std`` row over its seeds (the same statistic as each table cell:
rounds and energy to target over the seeds that reach it, std empty for one value); then one
``seed`` row per run with that run's own numbers. Values are unrounded; accuracy-like metrics
in percent (``*_pct``) as in the table.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedapp.report.sections import group_target

if TYPE_CHECKING:
    from fedapp.server.results import Run


def run_numbers(run: Run, target: float, key: str, energy: bool) -> dict[str, Any]:
    """One run's numbers, each the per-seed value a table cell averages."""
    series = run.series(key)
    out: dict[str, Any] = {
        f"final_{key}_pct": series[-1] * 100 if series else None,
        f"best_{key}_pct": max(series) * 100 if series else None,
        "rounds_to_target": run.rounds_to(target, key),
        "mb_up": sum(run.series("bytes_up")) / 1e6,
        "mb_down": sum(run.series("bytes_down")) / 1e6,
    }
    if energy:
        joules = run.cumulative_joules()
        out["energy_j"] = joules[-1] if joules else None
        out["energy_to_target_j"] = run.joules_to(target, key) if run.energy_key else None
    return out


def _stats(values: list[Any]) -> tuple[float | None, float | None]:
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return None, None
    return statistics.mean(kept), statistics.stdev(kept) if len(kept) > 1 else None


def summarise(groups: dict[str, list[Run]], target: float | None, key: str = "accuracy") -> list[dict[str, Any]]:
    """Per group: its name, method, seed count, target, how many seeds reach it, the mean and
    std of each number over its seeds, and each seed's own numbers."""
    energy = any(r.energy_key for g in groups.values() for r in g)
    out = []
    for name, group in groups.items():
        t = group_target(group, target)
        per_run = [
            {"run": r.label, "seed": r.config.get("seed"), **run_numbers(r, t, key, energy)}
            for r in group
        ]  # fmt: skip
        fields = [f for f in per_run[0] if f not in ("run", "seed")]
        stats = {f: _stats([p[f] for p in per_run]) for f in fields}
        out.append({
            "group": name,
            "method": group[0].config.get("method", "?"),
            "seeds": len(group),
            "target": t,
            "reached": sum(p["rounds_to_target"] is not None for p in per_run),
            "mean": {f: s[0] for f, s in stats.items()},
            "std": {f: s[1] for f, s in stats.items()},
            "runs": per_run,
        })  # fmt: skip
    return out


def csv_rows(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Long form: per group a ``mean`` row, a ``std`` row, then one ``seed`` row per run."""
    rows = []
    for g in summary:
        head = {"group": g["group"], "method": g["method"], "seeds": g["seeds"], "target": g["target"], "reached": g["reached"]}
        rows.append({**head, "stat": "mean", "run": "", "seed": "", **g["mean"]})
        rows.append({**head, "stat": "std", "run": "", "seed": "", **g["std"]})
        rows.extend({**head, "stat": "seed", **run} for run in g["runs"])
    return rows


def write_summary(summary: list[dict[str, Any]], out_dir: Path, key: str) -> tuple[Path, Path]:
    """``summary.csv`` (empty cell: no value) and ``summary.json`` (null: no value) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = csv_rows(summary)
    fields = ["group", "method", "stat", "run", "seed", "seeds", "target", "reached"]
    fields += [f for f in rows[0] if f not in fields] if rows else []
    csv_path = out_dir / "summary.csv"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows({f: ("" if row.get(f) is None else row.get(f)) for f in fields} for row in rows)
    json_path = out_dir / "summary.json"
    json_path.write_text(json.dumps({"metric": key, "groups": summary}, indent=2) + "\n")
    return csv_path, json_path
