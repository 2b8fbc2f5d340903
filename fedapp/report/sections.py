"""Optional ``fedapp report`` sections: per-seed (paired) outcomes and the warmup wire table.

Seeds pair runs across groups (same model init, batch order and mask draws for the same
seed), so a per-seed table shows whether a gain holds on every seed or only on average.
The warmup table splits ``bytes_up`` into warmup and full rounds (FedPeWS's ``warmup``
flag) next to the mask statistics the server logs in warmup rounds.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from fedapp.methods.metric_names import WARMUP

if TYPE_CHECKING:
    from fedapp.server.results import Run


def per_seed_table(groups: dict[str, list[Run]], target: float | None, key: str = "accuracy") -> str:
    """Rows = groups, columns = seeds; cell = final ``key`` % and, when reached, the round of
    the first ``key`` >= target in parentheses. The last column is the paired difference
    from the first group: the mean over the seeds both have of (this - first), in points."""
    seeds = sorted({int(r.config.get("seed", 0)) for group in groups.values() for r in group})

    def by_seed(group: list[Run]) -> dict[int, Run]:
        return {int(r.config.get("seed", 0)): r for r in group if r.series(key)}

    names = list(groups)
    first = by_seed(groups[names[0]]) if names else {}
    lines = [
        f"| run | {' | '.join(f'seed {s}' for s in seeds)} | paired Δ vs {names[0] if names else '—'} (points) |",
        "|---" * (len(seeds) + 2) + "|",
    ]
    for name in names:
        runs = by_seed(groups[name])
        cells = []
        for seed in seeds:
            run = runs.get(seed)
            if run is None:
                cells.append("—")
                continue
            reached = run.rounds_to(group_target(groups[name], target), key)
            cells.append(f"{run.series(key)[-1] * 100:.2f}" + (f" ({reached})" if reached is not None else ""))
        shared = sorted(set(runs) & set(first))
        diffs = [(runs[s].series(key)[-1] - first[s].series(key)[-1]) * 100 for s in shared]
        delta = f"{statistics.mean(diffs):+.2f} ({len(diffs)} seeds)" if diffs and name != names[0] else "—"
        lines.append(f"| {name} | {' | '.join(cells)} | {delta} |")
    goal = "each run's target-accuracy" if target is None else f"{target:.0%}"
    return f"Final {key} % per seed (round of first {key} ≥ {goal} in parentheses):\n\n" + "\n".join(lines) + "\n"


def group_target(group: list[Run], target: float | None) -> float:
    """``target``, or (None) the group's own ``target-accuracy`` (the same for all its seeds)."""
    return target if target is not None else float(group[0].config.get("target-accuracy", 0.99))


def _mean(values: list[float], fmt: str) -> str:
    return format(statistics.mean(values), fmt) if values else "—"


def warmup_table(groups: dict[str, list[Run]]) -> str:
    """Per group: warmup rounds, mean bytes_up per warmup round and per full round, and the
    mask density and overlap (mean pairwise Jaccard) of the last warmup round."""
    lines = [
        "| run | seeds | warmup rounds | bytes_up per warmup round | mask density (last warmup) "
        "| mask overlap (last warmup) | bytes_up per round after warmup |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, group in groups.items():
        warm_by_run = [[row for row in r.rows if row.get(WARMUP)] for r in group]
        warm = [row for rows in warm_by_run for row in rows]
        full = [row for r in group for row in r.rows if not row.get(WARMUP)]
        last = [rows[-1] for rows in warm_by_run if rows]
        lines.append(
            f"| {name} | {len(group)} | {len(warm) // len(group)} | {_mean([float(r['bytes_up']) for r in warm], ',.0f')} | "
            f"{_mean([float(r['mask_density']) for r in last if 'mask_density' in r], '.3f')} | "
            f"{_mean([float(r['mask_overlap']) for r in last if 'mask_overlap' in r], '.3f')} | "
            f"{_mean([float(r['bytes_up']) for r in full], ',.0f')} |"
        )
    return "\n".join(lines) + "\n"
