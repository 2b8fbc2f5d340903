"""Plots and comparison tables from run folders (``fedapp report``).

Runs whose resolved configs differ only in ``seed`` (and ``run-dir``) form one group;
the table gives mean ± std over the group's seeds. Rounds-to-target follows the
FedPeWS convention (spec D19): mean ± std over the seeds that reach the target,
"NA (r)" when exactly one seed does, "×" when none does.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedapp.results import read_config, read_metrics

IGNORED_IN_GROUPING = {"seed", "run-dir"}


@dataclass
class Run:
    path: Path
    config: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return self.path.name

    def series(self, key: str) -> list[float]:
        return [float(r[key]) for r in self.rows if r.get(key) is not None]

    def cumulative_bytes(self) -> list[float]:
        total, out = 0.0, []
        for r in self.rows:
            total += float(r.get("bytes_up", 0)) + float(r.get("bytes_down", 0))
            out.append(total)
        return out

    def rounds_to(self, target: float, key: str = "accuracy") -> int | None:
        for r in self.rows:
            if r.get(key) is not None and float(r[key]) >= target:
                return int(r["round"])
        return None


def load_runs(paths: list[str | Path]) -> list[Run]:
    return [Run(Path(p), read_config(p), read_metrics(p)) for p in paths]


def group_runs(runs: list[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    keys: dict[tuple[tuple[str, str], ...], str] = {}
    for run in runs:
        sig = tuple(sorted((k, repr(v)) for k, v in run.config.items() if k not in IGNORED_IN_GROUPING))
        if sig not in keys:
            base = run.label.rsplit("-seed", 1)[0] if "-seed" in run.label else run.label
            name = base if base not in groups else run.label
            keys[sig] = name
            groups[name] = []
        groups[keys[sig]].append(run)
    return groups


def mean_std(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    if not values:
        return "—"
    vals = [v * scale for v in values]
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.mean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


def rounds_cell(rounds: list[int | None]) -> str:
    reached = [r for r in rounds if r is not None]
    if not reached:
        return "×"
    if len(reached) == 1 and len(rounds) > 1:
        return f"NA ({reached[0]})"
    return mean_std([float(r) for r in reached], digits=1) + (f" ({len(reached)}/{len(rounds)})" if len(reached) < len(rounds) else "")


def table(runs: list[Run], target: float, key: str = "accuracy") -> str:
    """Markdown table, one row per group of seeds."""
    lines = [
        f"| run | method | seeds | final {key} % | best {key} % | rounds to {target:.0%} | total MB up | total MB down |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, group in group_runs(runs).items():
        finals = [r.series(key)[-1] for r in group if r.series(key)]
        bests = [max(r.series(key)) for r in group if r.series(key)]
        up = [sum(r.series("bytes_up")) / 1e6 for r in group]
        down = [sum(r.series("bytes_down")) / 1e6 for r in group]
        method = group[0].config.get("method", "?")
        lines.append(
            f"| {name} | {method} | {len(group)} | {mean_std(finals, 100)} | {mean_std(bests, 100)} | "
            f"{rounds_cell([r.rounds_to(target, key) for r in group])} | {mean_std(up, digits=3)} | {mean_std(down, digits=3)} |"
        )
    return "\n".join(lines) + "\n"


def plot(runs: list[Run], out: Path, key: str = "accuracy") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for run in runs:
        acc = run.series(key)
        rounds = [int(r["round"]) for r in run.rows if r.get(key) is not None]
        ax_r.plot(rounds, acc, label=run.label)
        ax_b.plot([b / 1e6 for b in run.cumulative_bytes()][: len(acc)], acc, label=run.label)
    ax_r.set(xlabel="round", ylabel=key, title=f"{key} by round")
    ax_b.set(xlabel="cumulative MB on the wire (up + down)", ylabel=key, title=f"{key} by communication")
    for ax in (ax_r, ax_b):
        ax.grid(alpha=0.3)
    ax_r.legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def report(
    paths: list[str | Path], out_dir: str | Path, target: float | None = None, key: str = "accuracy", tiers: bool = False
) -> tuple[str, Path]:
    runs = load_runs(paths)
    if target is None:
        target = float(runs[0].config.get("target-accuracy", 0.99))
    md = table(runs, target, key)
    if tiers:
        md += "\n" + tier_table(runs, key)
    out = Path(out_dir)
    png = plot(runs, out / f"{key}.png", key)
    (out / "report.md").write_text(md + f"\n![{key}]({png.name})\n")
    return md, png


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.4f}" if values else "—"


def _round_budget(config: dict[str, Any]) -> float:
    """T x K: the client-rounds of a run that never stops early."""
    per_round = max(1, round(float(config.get("fraction-train", 1)) * int(config.get("num-clients", 1))))
    return float(config.get("num-server-rounds", 0)) * per_round


def tier_table(runs: list[Run], key: str = "personalized_accuracy") -> str:
    """Markdown table for tiered / early-stopping runs, one row per group of seeds:
    final ``key``, rounds run, client-rounds trained and the share saved against
    T x K, the first round with fewer than K active clients (``es_round_code``), and
    the median local train seconds of a client-round by active fraction p (round 1,
    which pays one-off warm-up, left out)."""
    fractions = sorted({float(p) for run in runs for r in run.rows for p in (r.get("client_active_fraction") or {}).values()})
    head = "| run | method | seeds | final " + key + " % | rounds | client-rounds | saved | code ES round (acc %) |"
    head += "".join(f" train s, p={p:g} |" for p in fractions)
    lines = [head, "|" + "---|" * (8 + len(fractions))]
    for name, group in group_runs(runs).items():
        finals = [r.series(key)[-1] for r in group if r.series(key)]
        client_rounds = [float(sum(int(row.get("clients", 0)) for row in r.rows)) for r in group]
        budget = [_round_budget(r.config) for r in group]
        saved = [1 - c / b for c, b in zip(client_rounds, budget, strict=True) if b]
        code = [(int(row["round"]), float(row.get(key) or 0)) for r in group for row in r.rows if "es_round_code" in row]
        code_cell = f"{mean_std([float(c[0]) for c in code], digits=1)} ({mean_std([c[1] for c in code], 100)})" if code else "—"
        secs: dict[float, list[float]] = {p: [] for p in fractions}
        for run in group:
            for row in run.rows[1:]:
                for pid, p in (row.get("client_active_fraction") or {}).items():
                    if pid in (row.get("train_seconds") or {}):
                        secs[float(p)].append(float(row["train_seconds"][pid]))
        lines.append(
            f"| {name} | {group[0].config.get('method', '?')} | {len(group)} | {mean_std(finals, 100)} | "
            f"{mean_std([float(len(r.rows)) for r in group], digits=1)} | {mean_std(client_rounds, digits=1)} | "
            f"{mean_std(saved, 100, 1)} % | {code_cell} |" + "".join(f" {_median(secs[p])} |" for p in fractions)
        )
    return "\n".join(lines) + "\n"
