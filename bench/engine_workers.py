"""engine-workers: the in-process engine's round on 1 process against 2 Ray workers (one run each).

1. FedAvg, CNN on digits, 20 clients (IID), one local epoch: one process vs ``engine-workers = 2``.
2. FedPeWS, MLP on digits, 20 clients, ``client-batch = 8``, warm-up rounds: one process (one
   batched executor) vs 2 workers (each batching its 10 clients).
Each run has 3 rounds; the number is the mean wall time of rounds 2-3 (round 1 includes the
workers' data loading), the row's ``seconds``: the train phase, aggregation and the server's
central evaluation. The 2-worker runs share one local Ray (2 CPUs), started before them and not
counted. Prints the machine's load average: on a shared machine the ratio is contended.
Usage: python bench/engine_workers.py [--clients 20] [--epochs 1] [--only cnn|pews]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402

from fedapp.sim.run_local import run_local  # noqa: E402


def later_rounds(run_dir: Path) -> float:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return statistics.mean(r["seconds"] for r in rows[1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=1, help="local epochs of both workloads (more: a more training-bound round)")
    ap.add_argument("--only", choices=("cnn", "pews"), help="one workload")
    args = ap.parse_args()
    cnn = {
        "dataset": "digits", "model": "cnn", "partition": "iid", "num-clients": args.clients, "num-server-rounds": 3,
        "local-epochs": args.epochs, "lr": 0.05,
    }  # fmt: skip
    pews = {
        "method": "fedpews", "dataset": "digits", "partition": "iid", "num-clients": args.clients, "mlp-hidden": "64,64",
        "num-server-rounds": 3, "warmup-fraction": 1.0, "local-epochs": args.epochs, "lr": 0.05, "client-batch": 8,
    }  # fmt: skip
    print(f"load average before: {os.getloadavg()}")
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    try:
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            loads = {"cnn": ("FedAvg CNN, client-batch 1", cnn), "pews": ("FedPeWS MLP, client-batch 8", pews)}
            for name, cfg in [loads[args.only]] if args.only else loads.values():
                times = {}
                for workers in (1, 2):
                    start = time.perf_counter()
                    run = run_local({**cfg, "engine-workers": workers, "run-dir": str(Path(tmp) / f"{name[:6]}-{workers}")})
                    times[workers] = later_rounds(run)
                    print(f"{name}: {workers} worker(s): rounds 2-3 mean {times[workers]:.3f} s (run {time.perf_counter() - start:.1f} s)")
                results.append((name, times))
    finally:
        ray.shutdown()
    print(f"load average after: {os.getloadavg()}")
    for name, times in results:
        print(f"{name}: 1 worker {times[1]:.3f} s, 2 workers {times[2]:.3f} s per round: speed-up {times[1] / times[2]:.2f}x")


if __name__ == "__main__":
    main()
