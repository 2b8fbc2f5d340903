"""Same FedAvg workload through `flwr run` (Ray simulation) and the in-process engine.

Workload: 10 clients, CNN on digits (Dirichlet 0.5), 20 rounds, 1 local epoch.
Prints, from this one run: mean per-round wall time of each engine and their ratio,
and the fixed start-up + shutdown time of each (total wall time minus the rounds).
Usage: python bench/flwr_vs_inprocess.py [--rounds 20] [--clients 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedapp.sim.run_local import run_local  # noqa: E402
from tests.flwr_harness import flwr_run, stop_all  # noqa: E402


def round_seconds(run_dir: Path) -> list[float]:
    return [json.loads(line)["seconds"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=10)
    args = ap.parse_args()
    cfg = {
        "dataset": "digits", "model": "cnn", "partition": "dirichlet", "dirichlet-alpha": 0.5,
        "num-clients": args.clients, "num-server-rounds": args.rounds, "local-epochs": 1, "lr": 0.05,
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        start = time.perf_counter()
        try:
            proc = flwr_run(t, {**cfg, "run-dir": str(t / "flwr")}, num_supernodes=args.clients, timeout=1800)
        finally:
            stop_all()  # the SuperLink this started (a copy of the checkout's own, tests/flwr_harness.py)
        flwr_total = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"flwr run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        start = time.perf_counter()
        run_local({**cfg, "run-dir": str(t / "local")})
        local_total = time.perf_counter() - start
        flwr_rounds, local_rounds = round_seconds(t / "flwr"), round_seconds(t / "local")
    f_mean, l_mean = statistics.mean(flwr_rounds), statistics.mean(local_rounds)
    f_later, l_later = statistics.mean(flwr_rounds[1:]), statistics.mean(local_rounds[1:])
    print(f"workload: FedAvg, {args.clients} clients, CNN on digits, {args.rounds} rounds (one run each)")
    print(f"{'engine':<12}{'total s':>10}{'start+stop s':>14}{'round mean s':>14}{'rounds 2.. s':>14}{'round 1 s':>11}")
    for name, total, rounds in (("flwr run", flwr_total, flwr_rounds), ("in-process", local_total, local_rounds)):
        mean, later = statistics.mean(rounds), statistics.mean(rounds[1:])
        print(f"{name:<12}{total:>10.1f}{total - sum(rounds):>14.1f}{mean:>14.3f}{later:>14.3f}{rounds[0]:>11.2f}")
    print(f"per-round wall-time ratio flwr/in-process: {f_mean / l_mean:.2f} (rounds 2..: {f_later / l_later:.2f})")


if __name__ == "__main__":
    main()
