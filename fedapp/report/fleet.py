"""``fedapp report --fleet``: runs made by `fedapp fleet run` (fleet.jsonl beside metrics.jsonl).

Per run: wall seconds and *modelled* joules until the target accuracy (cumulated over the
fleet's rounds, first round including the ServerApp's start), MB per node (up + down through
its link, mean over nodes), and the straggler share: per round, (slowest node's upload time -
median node's) / round wall time, i.e. the part of the round the fleet waited on its
straggler; the class that was slowest most often is named. The plot: accuracy against wall
seconds and against modelled joules. Modelled joules never mix with metered ones.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any


def fleet_rows(run: Path) -> list[dict[str, Any]]:
    path = run / "fleet.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: was {run} made by `fedapp fleet run`?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary(run: Path, target: float) -> dict[str, Any]:
    rows = fleet_rows(run)
    config = json.loads((run / "config.json").read_text())
    wall = joules = 0.0
    to_target: tuple[int, float, float] | None = None
    for r in rows:
        wall += r["wall_seconds"]
        joules += r["modelled_joules"]
        if to_target is None and r["accuracy"] is not None and r["accuracy"] >= target:
            to_target = (r["round"], wall, joules)
    nodes = len(rows[0]["nodes"]) if rows else 0
    mb = sum(n["bytes_up"] + n["bytes_down"] for r in rows for n in r["nodes"]) / max(1, nodes) / 1e6
    shares = []
    for r in rows:
        t = [n["upload_90_s"] for n in r["nodes"]]
        shares.append((max(t) - statistics.median(t)) / r["wall_seconds"] if r["wall_seconds"] > 0 else 0.0)
    slowest = Counter(r["slowest_class"] for r in rows).most_common(1)
    return {
        "name": run.name, "method": config.get("method"), "rounds": len(rows), "wall": wall, "joules": joules, "mb_per_node": mb,
        "final": rows[-1]["accuracy"] if rows else None, "best": max((r["accuracy"] or 0.0) for r in rows) if rows else None,
        "to_target": to_target, "straggler_share": statistics.mean(shares) if shares else 0.0,
        "slowest": f"{slowest[0][0]} ({slowest[0][1]}/{len(rows)})" if slowest else "-",
    }  # fmt: skip


def fleet_table(runs: list[Path], target: float) -> str:
    lines = [
        f"### Fleet: to {100 * target:.0f}% accuracy (wall seconds and *modelled* joules)",
        "",
        "| run | method | rounds | final % | best % | round | wall s to target | modelled J to target | total wall s | total modelled J "
        "| MB/node | straggler share | slowest class |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in (summary(r, target) for r in runs):
        hit = s["to_target"]
        reach = f"{hit[0]} | {hit[1]:.0f} | {hit[2]:.0f}" if hit else "not reached | - | -"
        lines.append(
            f"| {s['name']} | {s['method']} | {s['rounds']} | {100 * (s['final'] or 0):.1f} | {100 * (s['best'] or 0):.1f} | {reach} "
            f"| {s['wall']:.0f} | {s['joules']:.0f} | {s['mb_per_node']:.2f} | {100 * s['straggler_share']:.0f}% | {s['slowest']} |"
        )
    return "\n".join(lines) + "\n"


def fleet_plot(runs: list[Path], out: Path, target: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for run in runs:
        rows = fleet_rows(run)
        acc = [r["accuracy"] or 0.0 for r in rows]
        wall = [sum(r["wall_seconds"] for r in rows[: i + 1]) for i in range(len(rows))]
        joules = [sum(r["modelled_joules"] for r in rows[: i + 1]) for i in range(len(rows))]
        a.plot(wall, acc, marker="o", label=run.name)
        b.plot(joules, acc, marker="o", label=run.name)
    for ax, label in ((a, "wall-clock seconds on the fleet"), (b, "modelled joules (whole fleet, power model)")):
        ax.axhline(target, color="grey", lw=0.8, ls="--")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    a.set_ylabel("global test accuracy")
    b.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    png = out / "fleet.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
