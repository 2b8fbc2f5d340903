"""Plots and comparison tables from run folders (``fedapp report``).

Runs whose resolved configs differ only in ``seed`` (and ``run-dir``, how the run was started:
``resume``, ``overwrite``, ``discovery-timeout``, and any keys
named with ``--group-ignore``, e.g. ``data-seed`` when each seed redraws the split) form one group;
the table gives mean ± std over the group's seeds. Rounds-to-target follows the
FedPeWS convention (spec D19): mean ± std over the seeds that reach the target,
"NA (r)" when exactly one seed does, "×" when none does.

Runs with joules (an on-device meter's ``round_j``, or ``external_j`` joined from a
wall-plug CSV into metrics-energy.jsonl) add total energy and energy-to-target
columns and an accuracy-vs-cumulative-joules plot; ``baseline`` adds a table of
energy, time and client-rounds saved and accuracy lost against one group (the
FedSPU paper's early-stopping comparison).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedapp.methods.metric_names import CLIENT_ACTIVE_FRACTION, ES_ROUND_CODE
from fedapp.report.anomaly import anomaly_table
from fedapp.report.plot import plot
from fedapp.report.provenance import provenance
from fedapp.report.sections import group_target, per_seed_table, warmup_table
from fedapp.report.summary import summarise, write_summary
from fedapp.report.traffic import has_traffic, traffic_table
from fedapp.server.results import Run, read_config_and_provenance, read_metrics

IGNORED_IN_GROUPING = {"seed", "run-dir", "resume", "overwrite", "discovery-timeout", "provenance"}  # how and where a run started

TABLE_NOTE = (
    "Cells are mean ± std over a group's seeds. Rounds to target: over the seeds that reach it, "
    "with (k/n) when only k of n do; NA (r): only one seed does, at round r; ×: no seed reaches it. "
    "MB: 10^6 bytes of arrays sent (Flower's ArrayRecord.count_bytes: values, npy headers, names)."
)
PERSONAL_NOTE = (
    "Personalised accuracy is self-reported: each client scores its own model on its own local test split "
    "and sends the number; the server checks its form (in [0, 1], the client's own partition, 1 to test-split-size "
    "samples) and takes the unweighted mean over clients, but cannot recompute it."
)


def load_runs(paths: Sequence[str | Path]) -> list[Run]:
    runs = []
    for p in paths:
        config, provenance = read_config_and_provenance(p)
        runs.append(Run(Path(p), config, read_metrics(p, energy=True), provenance))
    return runs


def base_name(run: Run) -> str:
    return run.label.rsplit("-seed", 1)[0] if "-seed" in run.label else run.label


def group_runs(runs: list[Run], ignore: frozenset[str] = frozenset()) -> dict[str, list[Run]]:
    """Groups of seeds, named after the run folder without ``-seedN``; a name used in more
    than one parent folder (``n2/fedavg``, ``e5/fedavg``) is prefixed with the folder."""
    parents: dict[str, set[Path]] = {}
    for run in runs:
        parents.setdefault(base_name(run), set()).add(run.path.parent)
    groups: dict[str, list[Run]] = {}
    keys: dict[tuple[tuple[str, str], ...], str] = {}
    for run in runs:
        sig = tuple(sorted((k, repr(v)) for k, v in run.config.items() if k not in IGNORED_IN_GROUPING | ignore))
        if sig not in keys:
            base = base_name(run)
            base = f"{run.path.parent.name}/{base}" if len(parents[base]) > 1 else base
            keys[sig] = base if base not in groups else run.label
            groups[keys[sig]] = []
        groups[keys[sig]].append(run)
    return groups


def mean_std(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    if not values:
        return "—"
    vals = [v * scale for v in values]
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.mean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


def whole(v: float) -> str:
    """A count of rounds: ``13``, not ``13.0``; a mean between whole numbers keeps one decimal."""
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def rounds_stat(values: list[float]) -> str:
    """mean ± std of round counts, whole numbers printed as integers."""
    if not values:
        return "—"
    if len(values) == 1:
        return whole(values[0])
    return f"{whole(statistics.mean(values))} ± {whole(statistics.stdev(values))}"


def rounds_cell(rounds: list[int | None]) -> str:
    reached = [r for r in rounds if r is not None]
    if not reached:
        return "×"
    if len(reached) == 1 and len(rounds) > 1:
        return f"NA ({reached[0]})"
    return rounds_stat([float(r) for r in reached]) + (f" ({len(reached)}/{len(rounds)})" if len(reached) < len(rounds) else "")


def table(runs: list[Run], target: float | None, key: str = "accuracy", ignore: frozenset[str] = frozenset()) -> str:
    """Markdown table, one row per group of seeds (energy columns when any run has joules).
    ``target=None``: each group is measured against its own ``target-accuracy``, shown in the cell."""
    energy = any(r.energy_key for r in runs)
    goal = "target" if target is None else f"{target:.0%}"
    head = f"| run | method | seeds | final {key} % | best {key} % | rounds to {goal} | total MB up | total MB down |"
    lines = [head + (f" total energy J | energy to {goal} J |" if energy else ""), "|---" * (10 if energy else 8) + "|"]
    for name, group in group_runs(runs, ignore).items():
        t = group_target(group, target)
        shown = f" @ {t:.0%}" if target is None else ""
        finals = [r.series(key)[-1] for r in group if r.series(key)]
        bests = [max(r.series(key)) for r in group if r.series(key)]
        up = [sum(r.series("bytes_up")) / 1e6 for r in group]
        down = [sum(r.series("bytes_down")) / 1e6 for r in group]
        method = group[0].config.get("method", "?")
        lines.append(
            f"| {name} | {method} | {len(group)} | {mean_std(finals, 100)} | {mean_std(bests, 100)} | "
            f"{rounds_cell([r.rounds_to(t, key) for r in group])}{shown} | {mean_std(up, digits=3)} | {mean_std(down, digits=3)} |"
            + (energy_cells(group, t, key) if energy else "")
        )
    note = TABLE_NOTE + (" " + PERSONAL_NOTE if key.startswith("personalized_accuracy") else "")
    return "\n".join(lines) + "\n\n" + note + "\n"


def energy_cells(group: list[Run], target: float, key: str) -> str:
    totals = [c[-1] for r in group if (c := r.cumulative_joules())]
    to_target = [r.joules_to(target, key) for r in group if r.energy_key]
    reached = [j for j in to_target if j is not None]
    missed = f" ({len(reached)}/{len(to_target)})" if len(reached) < len(to_target) else ""
    cell = mean_std(reached, digits=1) + missed if reached else "×"
    return f" {mean_std(totals, digits=1)} | {cell} |"


def savings(runs: list[Run], baseline: str, key: str = "accuracy", ignore: frozenset[str] = frozenset()) -> str:
    """Each group against ``baseline``: energy, client time, client-rounds saved (%) and accuracy lost (points)."""
    groups = group_runs(runs, ignore)
    if baseline not in groups:
        raise ValueError(f"--baseline {baseline!r} is not one of the run groups: {', '.join(groups)}")

    def means(group: list[Run]) -> dict[str, float | None]:
        joules = [c[-1] for r in group if (c := r.cumulative_joules())]
        return {
            "energy": statistics.mean(joules) if len(joules) == len(group) else None,
            "train": statistics.mean(r.total("train_s") for r in group),
            "wall": statistics.mean(r.total("seconds") for r in group),
            "client_rounds": statistics.mean(r.total("clients") for r in group),
            "rounds": statistics.mean(len(r.rows) for r in group),
            "final": statistics.mean(r.series(key)[-1] for r in group if r.series(key)),
        }

    def saved(new: float | None, old: float | None) -> str:
        return "—" if new is None or not old else f"{100 * (1 - new / old):.1f}"

    base = means(groups[baseline])
    lines = [
        f"| run vs {baseline} | energy saved % | client training time saved % | wall time saved % | client-rounds saved % "
        f"| rounds | final {key} % | {key} lost (points) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, group in groups.items():
        if name == baseline:
            continue
        m = means(group)
        lines.append(
            f"| {name} | {saved(m['energy'], base['energy'])} | {saved(m['train'], base['train'])} | {saved(m['wall'], base['wall'])} | "
            f"{saved(m['client_rounds'], base['client_rounds'])} | {m['rounds']:.0f} vs {base['rounds']:.0f} | "
            f"{100 * (m['final'] or 0):.2f} vs {100 * (base['final'] or 0):.2f} | {100 * ((base['final'] or 0) - (m['final'] or 0)):.2f} |"
        )
    return "\n".join(lines) + "\n"


def report(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    target: float | None = None,
    key: str = "accuracy",
    baseline: str | None = None,
    ignore: frozenset[str] = frozenset(),
    direction: str = "both",
    tiers: bool = False,
    per_seed: bool = False,
    warmup: bool = False,
    fleet: bool = False,
) -> tuple[str, Path]:
    runs = load_runs(paths)
    if target is None and len({group_target([r], None) for r in runs}) == 1:
        target = group_target(runs, None)  # one target: name it in the header
    md = table(runs, target, key, ignore)
    if baseline is not None:
        md += "\n" + savings(runs, baseline, key, ignore)
    if tiers:
        md += "\n" + tier_table(runs, key, ignore)
    groups = group_runs(runs, ignore)
    if per_seed:
        md += "\n" + per_seed_table(groups, target, key)
    if warmup:
        md += "\n" + warmup_table(groups)
    if has_traffic(groups):
        md += "\n" + traffic_table(groups, baseline)
    anomalies = anomaly_table(runs)
    if anomalies:
        md += "\n" + anomalies
    md += "\n" + provenance(groups, ignore)
    out = Path(out_dir)
    for stale in out.glob(f"{key}-groups.*"):  # an earlier report's panels for more groups than this one has
        stale.unlink()
    write_summary(summarise(groups, target, key), out, key)
    png = plot(groups, out / f"{key}.png", key, direction)
    if fleet:  # runs of `fedapp fleet run`: wall seconds and modelled joules to target (fedapp.report.fleet)
        from fedapp.report.fleet import fleet_plot, fleet_table

        fleet_target = target if target is not None else group_target(runs, None)
        md += f"\n{fleet_table([Path(p) for p in paths], fleet_target)}\n![fleet](fleet.png)\n"
        fleet_plot([Path(p) for p in paths], out, fleet_target)
    groups_png = png.with_name(f"{png.stem}-groups.png")
    figures = f"\n![{key}]({png.name})\n" + (f"\n![{key}, one panel per group]({groups_png.name})\n" if groups_png.exists() else "")
    figures += "\nFigures also as PDF and SVG beside the PNG; the table's numbers per group and per seed: summary.csv, summary.json.\n"
    (out / "report.md").write_text(md + figures)
    return md, png


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.4f}" if values else "—"


def _round_budget(config: dict[str, Any]) -> float:
    """T x K: the client-rounds of a run that never stops early."""
    per_round = max(1, round(float(config.get("fraction-train", 1)) * int(config.get("num-clients", 1))))
    return float(config.get("num-server-rounds", 0)) * per_round


def tier_table(runs: list[Run], key: str = "personalized_accuracy", ignore: frozenset[str] = frozenset()) -> str:
    """Markdown table for tiered / early-stopping runs, one row per group of seeds:
    final ``key``, rounds run, client-rounds trained and the share saved against
    T x K, the first round with fewer than K active clients (``es_round_code``), and
    the median local train seconds of a client-round by active fraction p (round 1,
    which pays one-off warm-up, left out)."""
    fractions = sorted({float(p) for run in runs for r in run.rows for p in (r.get(CLIENT_ACTIVE_FRACTION) or {}).values()})
    head = "| run | method | seeds | final " + key + " % | rounds | client-rounds | saved | code ES round (acc %) |"
    head += "".join(f" train s, p={p:g} |" for p in fractions)
    lines = [head, "|" + "---|" * (8 + len(fractions))]
    for name, group in group_runs(runs, ignore).items():
        finals = [r.series(key)[-1] for r in group if r.series(key)]
        client_rounds = [float(sum(int(row.get("clients", 0)) for row in r.rows)) for r in group]
        budget = [_round_budget(r.config) for r in group]
        saved = [1 - c / b for c, b in zip(client_rounds, budget, strict=True) if b]
        code = [(int(row["round"]), float(row.get(key) or 0)) for r in group for row in r.rows if ES_ROUND_CODE in row]
        code_cell = f"{rounds_stat([float(c[0]) for c in code])} ({mean_std([c[1] for c in code], 100)})" if code else "—"
        secs: dict[float, list[float]] = {p: [] for p in fractions}
        for run in group:
            for row in run.rows[1:]:
                for pid, p in (row.get(CLIENT_ACTIVE_FRACTION) or {}).items():
                    if pid in (row.get("train_seconds") or {}):
                        secs[float(p)].append(float(row["train_seconds"][pid]))
        lines.append(
            f"| {name} | {group[0].config.get('method', '?')} | {len(group)} | {mean_std(finals, 100)} | "
            f"{rounds_stat([float(len(r.rows)) for r in group])} | {rounds_stat(client_rounds)} | "
            f"{mean_std(saved, 100, 1)} % | {code_cell} |" + "".join(f" {_median(secs[p])} |" for p in fractions)
        )
    return "\n".join(lines) + "\n"
