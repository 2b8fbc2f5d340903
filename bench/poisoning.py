"""Poisoning table for docs/faults.md: final accuracy under each ``aggregation`` rule with 0, 1 of 4
and 2 of 10 poisoned clients, and the honest-run cost of each rule under Dirichlet 0.5.

One in-process run per cell (digits, MLP 64-64, SGD lr 0.1, 1 local epoch, ``--rounds`` rounds,
seed 0): the real ClientApp, whose train replies the poisoned partitions rewrite on their way
out (tests/poisoning.py: ``flip10`` = global - 10 x update, ``constant`` = 0.5 everywhere,
``flip`` = global - update, the honest norm). Methods: FedAvg (central accuracy of the global
model) and FedSelect (masked: each client sends only its shared coordinates; the accuracy is
the personalised one, the mean over clients of its own model on its local test split,
evaluated in the last round). IID split for the poisoning table (the attack is the only
difference between clients); Dirichlet 0.5 for the honest cost, with the median seconds per
round over rounds 2.. .

    PYTHONPATH=. nice python bench/poisoning.py [--rounds 20] [--out runs/poisoning.jsonl] [--table-only]

Each finished run appends one JSON line to ``--out`` (a rerun skips the cells already there);
the tables are printed from that file. Seconds per round on a shared machine move with its
load, so a last table times the one step the rules change, ``fedapp.server.robust.aggregate`` alone
(median of 5 calls), on 10 dense replies of the digits MLP and of a 10^6-parameter model.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from fedapp.core.aggregate import Contribution
from fedapp.server.robust import aggregate
from tests.poisoning import run_poisoned

RULES = ("mean", "trimmed-mean", "median", "norm-bound")
METHODS = {"fedavg": "accuracy", "fedselect": "personalized_accuracy"}
SETTINGS = (  # (clients, poisoned partitions)
    (4, (1,)),
    (10, (1, 2)),
)
ATTACKS = ("flip10", "constant", "flip")


def overrides(method: str, clients: int, rule: str, rounds: int, partition: str) -> dict[str, Any]:
    return {
        "dataset": "digits", "method": method, "num-clients": clients, "partition": partition, "dirichlet-alpha": 0.5,
        "num-server-rounds": rounds, "mlp-hidden": "64,64", "lr": 0.1, "aggregation": rule, "seed": 0,
        "personalized-eval-every": rounds,
    }  # fmt: skip


def cells(rounds: int) -> list[dict[str, Any]]:
    out = []
    for method in METHODS:
        for clients, bad in SETTINGS:
            for attack in ("none", *ATTACKS):
                for rule in RULES:
                    out.append({"method": method, "clients": clients, "bad": [] if attack == "none" else list(bad), "attack": attack,
                                "rule": rule, "partition": "iid", "rounds": rounds})  # fmt: skip
        for rule in RULES:
            out.append(
                {"method": method, "clients": 10, "bad": [], "attack": "none", "rule": rule, "partition": "dirichlet", "rounds": rounds}
            )
    return out


def key_of(cell: dict[str, Any]) -> str:
    return json.dumps({k: cell[k] for k in ("method", "clients", "bad", "attack", "rule", "partition", "rounds")}, sort_keys=True)


def run_cell(cell: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        over = {**overrides(cell["method"], cell["clients"], cell["rule"], cell["rounds"], cell["partition"]), "run-dir": f"{tmp}/run"}
        start = time.perf_counter()
        out = run_poisoned(over, "flip" if cell["attack"] == "none" else cell["attack"], set(cell["bad"]))
        wall = time.perf_counter() - start
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    metric = METHODS[cell["method"]]
    top: dict[str, int] = {}  # per partition: rounds it had the largest norm ratio or the lowest cosine
    for row in rows:
        scores = row.get("anomaly") or {}
        if scores:
            norm = {p: s.get("norm_ratio") or 0.0 for p, s in scores.items()}
            cosine = {p: 1.0 if s.get("cosine") is None else s["cosine"] for p, s in scores.items()}
            named = {max(norm, key=norm.__getitem__), min(cosine, key=cosine.__getitem__)}
            for pid in named:
                top[pid] = top.get(pid, 0) + 1
    return {
        **cell, "final": rows[-1].get(metric), "central": rows[-1]["accuracy"], "wall_s": wall,
        "s_per_round": statistics.median(float(r["seconds"]) for r in rows[1:]) if len(rows) > 1 else None,
        "failures": sum(int(r["failures"]) for r in rows), "top_anomaly": top,
    }  # fmt: skip


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def tables(results: list[dict[str, Any]], rounds: int) -> str:
    got = {key_of(r): r for r in results}
    out = []
    for method, metric in METHODS.items():
        lines = [
            f"{method} ({metric}, round {rounds}); per rule: final % (rounds, of {rounds}, in which a poisoned partition had the "
            "round's largest norm ratio or lowest cosine, summed over the poisoned partitions)",
            "",
            "| clients | poisoned | attack | " + " | ".join(RULES) + " |",
            "|---|---|---|" + "---|" * len(RULES),
        ]
        for clients, bad in SETTINGS:
            for attack in ("none", *ATTACKS):
                row = []
                for rule in RULES:
                    poisoned_pids = [] if attack == "none" else list(bad)
                    cell = {"method": method, "clients": clients, "bad": poisoned_pids, "attack": attack,
                            "rule": rule, "partition": "iid", "rounds": rounds}  # fmt: skip
                    r = got.get(key_of(cell))
                    if r is None:
                        row.append("—")
                        continue
                    flagged = sum(r["top_anomaly"].get(str(p), 0) for p in poisoned_pids)
                    row.append(pct(r["final"]) + (f" ({flagged})" if poisoned_pids else ""))
                poisoned = "0 (honest)" if attack == "none" else ", ".join(map(str, bad))
                lines.append(f"| {clients} | {poisoned} | {attack if attack != 'none' else '—'} | " + " | ".join(row) + " |")
        out.append("\n".join(lines))
    lines = ["Honest cost, Dirichlet 0.5, 10 clients: final % / median s per round", "", "| method | " + " | ".join(RULES) + " |",
             "|---|" + "---|" * len(RULES)]  # fmt: skip
    for method in METHODS:
        row = []
        for rule in RULES:
            cell = {"method": method, "clients": 10, "bad": [], "attack": "none", "rule": rule, "partition": "dirichlet", "rounds": rounds}
            r = got.get(key_of(cell))
            row.append("—" if r is None else f"{pct(r['final'])} / {r['s_per_round']:.3f}")
        lines.append(f"| {method} | " + " | ".join(row) + " |")
    out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def aggregation_ms() -> str:
    """Milliseconds per ``aggregate`` call for each rule, 10 dense float32 replies."""
    mlp = {"0.weight": (64, 64), "0.bias": (64,), "2.weight": (64, 64), "2.bias": (64,), "4.weight": (10, 64), "4.bias": (10,)}
    shapes: dict[str, dict[str, tuple[int, ...]]] = {"digits MLP 64-64": mlp, "10^6 parameters": {"w": (1000, 1000)}}
    rng = np.random.default_rng(0)
    lines = ["aggregate() alone, 10 dense replies: ms per call (median of 5)", "", "| model | " + " | ".join(RULES) + " |",
             "|---|" + "---|" * len(RULES)]  # fmt: skip
    for name, shape in shapes.items():
        g = {k: rng.standard_normal(s).astype(np.float32) for k, s in shape.items()}
        noisy = [{k: (v + rng.standard_normal(v.shape)).astype(np.float32) for k, v in g.items()} for _ in range(10)]
        replies = [Contribution(1.0 + i, values) for i, values in enumerate(noisy)]
        cells = []
        for rule in RULES:
            times = []
            for _ in range(5):
                start = time.perf_counter()
                aggregate(rule, g, replies)
                times.append(time.perf_counter() - start)
            cells.append(f"{1000 * statistics.median(times):.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", default="runs/poisoning.jsonl")
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--only", choices=list(METHODS), help="run this method's cells only")
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.ERROR)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {key_of(r) for r in results}
    if not args.table_only:
        for cell in cells(args.rounds):
            if key_of(cell) in done or (args.only and cell["method"] != args.only):
                continue
            result = run_cell(cell)
            results.append(result)
            with out.open("a") as fh:
                fh.write(json.dumps(result) + "\n")
            print(f"{cell['method']} n={cell['clients']} bad={cell['bad']} {cell['attack']} {cell['rule']} {cell['partition']}: "
                  f"{pct(result['final'])} ({result['wall_s']:.1f}s)", flush=True)  # fmt: skip
    print(tables(results, args.rounds))
    print(aggregation_ms())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
