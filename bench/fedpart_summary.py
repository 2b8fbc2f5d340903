"""FedPart vs FNU numbers from finished run folders: best accuracy at the end of each cycle,
final accuracy, upload bytes (measured, and exact from parameter counts), client training seconds.

    PYTHONPATH=. python bench/fedpart_summary.py runs/fedpart-digits/fnu-seed{0,1,2} -- runs/fedpart-digits/fedpart-seed{0,1,2}
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from fedapp.report.compare import load_runs
from fedapp.server.results import Run


def cycle_ends(cfg: dict[str, Any], num_groups: int) -> list[int]:
    w, c, b, rl = cfg["warmup-rounds"], cfg["cycles"], cfg["full-rounds-between-cycles"], cfg["rounds-per-layer"]
    return [w + k * num_groups * rl + (k - 1) * b for k in range(1, c + 1)]


def best_until(run: Run, last: int) -> float:
    return max(float(r["accuracy"]) for r in run.rows if int(r["round"]) <= last)


def train_seconds(run: Run) -> list[float]:
    return [sum(r["train_seconds"].values()) for r in run.rows]


def exact_upload(run: Run) -> int:
    """4 bytes per trained parameter, per client, per round."""
    return sum(4 * int(r["trained_params"]) * int(r["clients"]) for r in run.rows)


def pm(vals: list[float], scale: float = 100.0) -> str:
    v = [x * scale for x in vals]
    return f"{statistics.mean(v):.2f} ± {statistics.stdev(v):.2f}" if len(v) > 1 else f"{v[0]:.2f}"


def accuracy_table(named: list[tuple[str, list[Run]]], ends: list[int]) -> list[str]:
    lines = [
        "| seed | method | " + " | ".join(f"best ≤ r{e} %" for e in ends) + " | final % | upload MB | client train s |",
        "|---|---|" + "---|" * len(ends) + "---|---|---|",
    ]
    for name, runs in named:
        for run in runs:
            cells = " | ".join(f"{100 * best_until(run, e):.2f}" for e in ends)
            final, up, secs = 100 * run.series("accuracy")[-1], sum(run.series("bytes_up")) / 1e6, sum(train_seconds(run))
            lines.append(f"| {run.config['seed']} | {name} | {cells} | {final:.2f} | {up:.3f} | {secs:.1f} |")
        means = " | ".join(pm([best_until(r, e) for r in runs]) for e in ends)
        lines.append(f"| mean ± std | {name} | {means} | {pm([r.series('accuracy')[-1] for r in runs])} | | |")
    return lines


def main(argv: list[str | Path]) -> None:
    split = [str(a) for a in argv].index("--")
    fnu, part = load_runs(list(argv[:split])), load_runs(list(argv[split + 1 :]))
    ends = cycle_ends(part[0].config, 1 + max(int(r["trained_group"]) for r in part[0].rows))
    print(f"FNU: {len(fnu)} runs, FedPart: {len(part)} runs; FedPart cycles end at rounds {ends}\n")
    print("\n".join(accuracy_table([("FNU", fnu), ("FedPart", part)], ends)))
    ex_f, ex_p = exact_upload(fnu[0]), exact_upload(part[0])
    me_f, me_p = sum(fnu[0].series("bytes_up")), sum(part[0].series("bytes_up"))
    print("\nupload bytes (all clients, all rounds):")
    print(f"- exact from parameter counts: FNU {ex_f:,}, FedPart {ex_p:,}, ratio {ex_p / ex_f:.5f}")
    print(f"- measured bytes_up: FNU {me_f:,.0f}, FedPart {me_p:,.0f}, ratio {me_p / me_f:.5f}")
    print(f"- measured / exact (.npy header + key per tensor): FNU {me_f / ex_f:.5f}, FedPart {me_p / ex_p:.5f}")
    print("\nclient training seconds (sum over clients and rounds):")
    across = [sum(train_seconds(p)) / sum(train_seconds(f)) for f, p in zip(fnu, part, strict=False)]
    print(f"- FedPart / FNU across runs (same seed, run at different times on a shared machine): {', '.join(f'{a:.3f}' for a in across)}")
    for run in part:
        secs, entries = train_seconds(run), [int(r["trained_group"]) for r in run.rows]
        full = statistics.mean(s for s, e in zip(secs, entries, strict=True) if e == -1)
        ratio = sum(secs) / (len(secs) * full)
        print(f"- within FedPart seed {run.config['seed']}: all rounds / (T x mean full round of the same run) = {ratio:.3f}")


if __name__ == "__main__":
    main(list(sys.argv[1:]))
