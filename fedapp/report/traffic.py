"""``fedapp report``'s traffic table: what each group of runs put on the wire, both directions.

From each round's ``wire_bytes_up`` / ``wire_bytes_down`` (the serialized size of every message
and reply, fedapp.downlink.traffic) summed over the run, mean ± std over seeds, in MB (1e6 bytes),
and the total as a share of a reference group's (``--baseline``, else the first). With
``downlink = selected`` the last column counts the messages that carried the full model after the
first round (a node's first model, a changed node, a cache-miss resend) and the catch-ups.
Runs written before these keys existed show "—".
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedapp.server.results import Run

UP, DOWN = "wire_bytes_up", "wire_bytes_down"


def has_traffic(groups: dict[str, list[Run]]) -> bool:
    return any(r.series(UP) for group in groups.values() for r in group)


def _mb(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.mean(values):.3f}" + (f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else "")


def totals(run: Run) -> tuple[float, float] | None:
    """(MB up, MB down) of a run; None if its rows carry no wire bytes."""
    if not run.series(UP):
        return None
    return run.total(UP) / 1e6, run.total(DOWN) / 1e6


def downlink_counts(run: Run) -> tuple[int, int, int]:
    """(full-model messages after round 1, catch-ups, cache-miss resends) over the run."""
    full = catch = miss = 0
    for row in run.rows:
        d = row.get("downlink") or {}
        full += len(d.get("full", {})) if int(row.get("round", 0)) > 1 else 0
        catch += len(d.get("catch_up", {}))
        miss += len(d.get("cache_miss", {}))
    return full, catch, miss


def traffic_table(groups: dict[str, list[Run]], baseline: str | None = None) -> str:
    ref = baseline if baseline in groups else next(iter(groups), None)
    means: dict[str, float] = {}
    lines = [
        f"| run | downlink | seeds | MB up | MB down | MB total | total / {ref} | full-model resends, catch-ups, cache-misses |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for name, group in groups.items():
        found = [t for r in group if (t := totals(r)) is not None]
        up, down = [t[0] for t in found], [t[1] for t in found]
        both = [u + d for u, d in zip(up, down, strict=True)]
        if both:
            means[name] = statistics.mean(both)
        counts = [downlink_counts(r) for r in group]
        mode = str(group[0].config.get("downlink", "full"))
        notes = ", ".join(str(sum(c[i] for c in counts)) for i in range(3)) if mode == "selected" else "—"
        rows.append((name, mode, len(group), _mb(up), _mb(down), _mb(both), notes))
    base = means.get(ref or "")
    for name, mode, n, up_s, down_s, both_s, notes in rows:
        share = f"{means[name] / base:.3f}" if base and name in means else "—"
        lines.append(f"| {name} | {mode} | {n} | {up_s} | {down_s} | {both_s} | {share} | {notes} |")
    return "Traffic: serialized message bytes, all rounds and clients, both directions (MB = 1e6 bytes):\n\n" + "\n".join(lines) + "\n"
