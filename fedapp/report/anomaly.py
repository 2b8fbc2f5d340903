"""``fedapp report``'s anomaly section: per run, the client whose updates stood out most.

Each round's row scores every averaged client (``anomaly``: update norm over the round's
median, cosine to the aggregate's step, and under a robust ``aggregation`` the share of its
coordinates trimmed or the factor its update was clipped by; fedapp/server/robust.py). Per run the
most anomalous client is the one with the largest mean norm ratio over the rounds it was
scored in (a scaled or replaced update), and the table names beside it the client with the
lowest mean cosine (an update against the others' direction at an honest size, which robust
rules leave out but a norm does not show); a client whose replies were dropped
(``failed_pids``, e.g. a step outlier) is counted too, since a dropped reply is never scored.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedapp.server.results import Run


def most_anomalous(rows: list[dict[str, Any]], lowest_cosine: bool = False) -> tuple[str, dict[str, float | int]] | None:
    """The client with the largest mean ``norm_ratio`` (``lowest_cosine``: the lowest mean ``cosine``)
    and its means over its scored rounds, or None."""
    scores: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        for pid, score in (row.get("anomaly") or {}).items():
            scores.setdefault(pid, []).append(score)
    if not scores:
        return None

    def mean(pid: str, key: str, default: float | None = None) -> float | None:
        found = [s.get(key, default) for s in scores[pid]]
        values = [float(v) for v in found if v is not None]
        return statistics.mean(values) if values else None

    def rank(p: str) -> float:  # smallest first
        return (mean(p, "cosine") or 0.0) if lowest_cosine else -(mean(p, "norm_ratio") or 0.0)

    pid = min(sorted(scores, key=int), key=rank)
    out: dict[str, float | int] = {"rounds": len(scores[pid])}
    for key, default in (("norm_ratio", None), ("cosine", None), ("trimmed", None), ("clip", 1.0)):
        value = mean(pid, key, default)
        if value is not None and (key != "clip" or any("clip" in s for s in scores[pid])):
            out[key] = value
    return pid, out


def anomaly_table(runs: list[Run]) -> str:
    """One line per run with anomaly scores: its most anomalous client, how far it stood out, and
    the rounds each client had its reply dropped (empty string when no run has scores)."""
    lines = [
        "| run | aggregation | most anomalous client | rounds scored | mean norm ratio | mean cosine | trimmed share | clip factor "
        "| lowest mean cosine | dropped (rounds) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    shown = False
    for run in runs:
        top = most_anomalous(run.rows)
        if top is None:
            continue
        shown = True
        pid, s = top
        dropped: dict[int, int] = {}
        for row in run.rows:
            for p in row.get("failed_pids") or []:
                dropped[int(p)] = dropped.get(int(p), 0) + 1
        cells = [f"{s[k]:.3f}" if k in s else "—" for k in ("norm_ratio", "cosine", "trimmed", "clip")]
        low_pid, low = most_anomalous(run.rows, lowest_cosine=True) or ("", {})
        lines.append(
            f"| {run.label} | {run.config.get('aggregation', 'mean')} | {pid} | {s['rounds']} | {' | '.join(cells)} | "
            f"{low_pid} ({low.get('cosine', 0.0):.3f}) | "
            f"{', '.join(f'{p} ({n})' for p, n in sorted(dropped.items())) or '—'} |"
        )
    if not shown:
        return ""
    note = (
        "Per run, the client with the largest mean update norm over its round's median (cosine: to the aggregate's step; "
        "trimmed: share of its coordinates left out by median or trimmed mean; clip: the factor norm-bound scaled it by, "
        "1 in rounds it was not clipped); lowest mean cosine: the client whose updates pointed most against the aggregate's; "
        "dropped: clients whose replies were refused, with the number of rounds."
    )
    return "Most anomalous client per run:\n\n" + "\n".join(lines) + "\n\n" + note + "\n"
