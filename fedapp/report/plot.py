"""The report's figure: one line per group of seeds (the per-round mean) with a band of
± one standard deviation over its seeds, one colour per group, a legend below the
plots that lists at most ``LEGEND_CAP`` groups, integer round ticks.

Panels: the metric by round, by cumulative MB on the wire and (when the runs have
joules) by cumulative energy; the x value of a round on the last two is the mean
over the group's seeds that have that round. Every figure is written as PNG (shown in
report.md) and as PDF and SVG beside it; with more than ``SMALL_MULTIPLES_FROM`` groups a
second figure, ``<metric>-groups``, gives each group a panel of its own.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedapp.server.results import Run

LEGEND_CAP = 20  # groups named in the legend; more are drawn, and the legend says how many it leaves out
LEGEND_COLUMNS = 4
SMALL_MULTIPLES_FROM = 6  # more groups than this also get <metric>-groups.png: one panel per group
SMALL_MULTIPLES_COLUMNS = 4

METRIC_LABELS = {
    "accuracy": "global test accuracy",
    "loss": "global test loss",
    "personalized_accuracy": "personalised accuracy (mean over clients)",
    "personalized_accuracy_min": "personalised accuracy (worst client)",
    "personalized_accuracy_max": "personalised accuracy (best client)",
}
BYTES_LABEL = {"up": "upload", "down": "download", "both": "up + down"}


def metric_label(key: str) -> str:
    return METRIC_LABELS.get(key, key.replace("_", " ").replace("-", " "))


@dataclass
class Band:
    """Per round: the mean and sample standard deviation over the seeds that have a value (std 0 for one seed)."""

    rounds: list[int]
    mean: list[float]
    std: list[float]
    count: list[int]


def band(group: list[Run], values: Callable[[Run], dict[int, float]]) -> Band:
    """``values(run)`` (round -> number) per round over the runs of ``group``."""
    per_round: dict[int, list[float]] = {}
    for run in group:
        for rnd, v in values(run).items():
            per_round.setdefault(rnd, []).append(v)
    rounds = sorted(per_round)
    vals = [per_round[r] for r in rounds]
    return Band(
        rounds, [statistics.mean(v) for v in vals], [statistics.stdev(v) if len(v) > 1 else 0.0 for v in vals], [len(v) for v in vals]
    )


def metric(key: str) -> Callable[[Run], dict[int, float]]:
    """round -> ``key`` for the rounds whose row has it."""
    return lambda run: {int(r["round"]): float(r[key]) for r in run.rows if r.get(key) is not None}


def cumulative_by_round(run: Run, totals: list[float] | None) -> dict[int, float]:
    return {} if totals is None else {int(r["round"]): t for r, t in zip(run.rows, totals, strict=True)}


def legend_labels(labels: list[str], cap: int = LEGEND_CAP) -> list[str]:
    """At most ``cap`` labels, then one saying how many were left out."""
    return labels if len(labels) <= cap else [*labels[:cap], f"… {len(labels) - cap} more groups (report.md)"]


def colours(n: int) -> list[tuple[float, ...]]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def plot(groups: dict[str, list[Run]], out: Path, key: str = "accuracy", direction: str = "both") -> Path:
    from fedapp.core.extras import require

    require("matplotlib", "fedapp report's figures")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = [r for g in groups.values() for r in g]
    energy = any(r.energy_key for r in runs)
    shown = min(len(groups), LEGEND_CAP)
    legend_rows = math.ceil(shown / LEGEND_COLUMNS) + (1 if len(groups) > LEGEND_CAP else 0)
    legend_in = 0.22 * legend_rows + 0.3
    panels = 3 if energy else 2
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5 + legend_in), squeeze=False)
    ax_r, ax_b = axes[0][0], axes[0][1]
    handles = []
    for (name, group), colour in zip(groups.items(), colours(len(groups)), strict=True):
        by_round = band(group, metric(key))
        if not by_round.rounds:
            continue
        seeds = f"{len(group)} seed{'s' if len(group) > 1 else ''}"
        (line,) = ax_r.plot(by_round.rounds, by_round.mean, color=colour, lw=1.4, label=f"{name} ({seeds})")
        handles.append(line)
        fill(ax_r, by_round.rounds, by_round, colour)
        mb = band(group, lambda run: {r: b / 1e6 for r, b in cumulative_by_round(run, run.cumulative_bytes(direction)).items()})
        at = dict(zip(mb.rounds, mb.mean, strict=True))
        xs = [at[r] for r in by_round.rounds]
        ax_b.plot(xs, by_round.mean, color=colour, lw=1.4)
        fill(ax_b, xs, by_round, colour)
        if energy:
            joules = band(group, lambda run: cumulative_by_round(run, run.cumulative_joules()))
            at_j = dict(zip(joules.rounds, joules.mean, strict=True))
            kept = [i for i, r in enumerate(by_round.rounds) if r in at_j]
            axes[0][2].plot([at_j[by_round.rounds[i]] for i in kept], [by_round.mean[i] for i in kept], color=colour, lw=1.4)
    label = metric_label(key)
    ax_r.set(xlabel="round", ylabel=label, title=f"{label} by round")
    ax_r.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_b.set(xlabel=f"cumulative MB on the wire ({BYTES_LABEL[direction]})", ylabel=label, title=f"{label} by communication")
    if energy:
        axes[0][2].set(xlabel="cumulative joules (all meters)", ylabel=label, title=f"{label} by energy")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
    labels = legend_labels([str(h.get_label()) for h in handles])
    if len(labels) > LEGEND_CAP:
        (blank,) = ax_r.plot([], [], color="none")
        handles = [*handles[:LEGEND_CAP], blank]
    fig.legend(handles, labels, loc="lower center", ncol=min(LEGEND_COLUMNS, max(1, len(labels))), fontsize=8, frameon=False)
    fig.text(0.995, 0.005, "lines: mean over seeds; bands: ± 1 std", ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, legend_in / (4.5 + legend_in), 1, 1))
    save(fig, out)
    if len(groups) > SMALL_MULTIPLES_FROM:
        small_multiples(groups, out.with_name(f"{out.stem}-groups{out.suffix}"), key)
    return out


def save(fig: object, out: Path) -> None:
    """``out`` (PNG, for report.md) and the same figure as PDF and SVG beside it (vector, for a paper)."""
    import matplotlib.pyplot as plt

    out.parent.mkdir(parents=True, exist_ok=True)
    for suffix in (out.suffix, ".pdf", ".svg"):
        fig.savefig(out.with_suffix(suffix), dpi=120)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]


def small_multiples(groups: dict[str, list[Run]], out: Path, key: str = "accuracy") -> Path:
    """One small panel per group (its mean and band by round, the other groups' means in light
    grey behind it), on shared axes: many groups stay readable where one panel's colours repeat."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    bands = {name: band(group, metric(key)) for name, group in groups.items()}
    cols = min(SMALL_MULTIPLES_COLUMNS, len(bands))
    rows = math.ceil(len(bands) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 2.4 * rows), sharex=True, sharey=True, squeeze=False)
    for ax, (name, b) in zip(axes.flat, bands.items(), strict=False):
        for other in bands.values():
            ax.plot(other.rounds, other.mean, color="0.85", lw=0.8)
        ax.plot(b.rounds, b.mean, color="C0", lw=1.4)
        fill(ax, b.rounds, b, matplotlib.colors.to_rgba("C0"))
        ax.set_title(f"{name} ({len(groups[name])} seed{'s' if len(groups[name]) > 1 else ''})", fontsize=8)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in list(axes.flat)[len(bands) :]:
        ax.set_visible(False)
    label = metric_label(key)
    fig.supxlabel("round")
    fig.supylabel(label)
    fig.suptitle(f"{label} by round, one panel per group (grey: the other groups)", fontsize=10)
    fig.tight_layout()
    save(fig, out)
    return out


def fill(ax: object, xs: list[float] | list[int], b: Band, colour: tuple[float, ...]) -> None:
    if any(s > 0 for s in b.std):
        lo = [m - s for m, s in zip(b.mean, b.std, strict=True)]
        hi = [m + s for m, s in zip(b.mean, b.std, strict=True)]
        ax.fill_between(xs, lo, hi, color=colour, alpha=0.18, lw=0)  # type: ignore[attr-defined]
