"""engine-workers: the in-process engine's round on 1 process against 2 Ray workers (one run each).

1. FedAvg, CNN on digits, 20 clients (IID), one local epoch: one process vs ``engine-workers = 2``.
2. FedPeWS, MLP on digits, 20 clients, ``client-batch = 8``, warm-up rounds: one process (one
   batched executor) vs 2 workers (each batching its 10 clients).
Each run has ``--rounds`` rounds; the numbers are means over rounds 2.. (round 1 includes the
workers' imports and data loading): the **train phase** (the round's train messages sent and every
reply back: the part the workers parallelise) and the whole round (the row's ``seconds``: train
phase, aggregation, the server's central evaluation, metrics row and checkpoint, which stay in
the driver). The 2-worker runs share one local Ray (2 CPUs), started before them and not
counted. Prints the machine's load average: on a shared machine the ratio is contended.
Usage: python bench/engine_workers.py [--clients 20] [--epochs 1] [--rounds 6] [--only cnn|pews]
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402
from flwr.app import Message, MessageType  # noqa: E402

from fedapp.engine.run_local import full_config, make_grid  # noqa: E402
from fedapp.server.loop import serve  # noqa: E402


def timed_run(cfg: dict[str, Any]) -> tuple[float, float]:
    """One run (as ``run_local`` does it); the means over rounds 2.. of its train phase and of its rounds."""
    from fedapp.client_app import app

    raw = full_config(cfg)
    grid = make_grid(app, raw, int(cfg["num-clients"]), None)
    phases: list[float] = []
    send = grid.send_and_receive

    def timed(messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        start = time.perf_counter()
        replies = send(messages, timeout=timeout)
        if messages and messages[0].metadata.message_type == MessageType.TRAIN:
            phases.append(time.perf_counter() - start)
        return replies

    grid.send_and_receive = timed  # type: ignore[method-assign]
    try:
        run = serve(grid, raw, base=Path.cwd())
    finally:
        grid.close()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return statistics.mean(phases[1:]), statistics.mean(r["seconds"] for r in rows[1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=1, help="local epochs of both workloads (more: a more training-bound round)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds per run; the means are over rounds 2..")
    ap.add_argument("--only", choices=("cnn", "pews"), help="one workload")
    args = ap.parse_args()
    common = {
        "dataset": "digits", "partition": "iid", "num-clients": args.clients, "num-server-rounds": args.rounds,
        "local-epochs": args.epochs, "lr": 0.05,
    }  # fmt: skip
    cnn = {**common, "model": "cnn"}
    pews = {**common, "method": "fedpews", "mlp-hidden": "64,64", "warmup-fraction": 1.0, "client-batch": 8}
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
                    times[workers] = timed_run({**cfg, "engine-workers": workers, "run-dir": str(Path(tmp) / f"{name[:6]}-{workers}")})
                    phase, whole = times[workers]
                    took = time.perf_counter() - start
                    print(f"{name}: {workers} worker(s): train phase {phase:.3f} s, round {whole:.3f} s (run {took:.1f} s)")
                results.append((name, times))
    finally:
        ray.shutdown()
    print(f"load average after: {os.getloadavg()}")
    for name, times in results:
        (p1, r1), (p2, r2) = times[1], times[2]
        print(f"{name}: train phase {p1:.3f} s vs {p2:.3f} s: {p1 / p2:.2f}x; round {r1:.3f} s vs {r2:.3f} s: {r1 / r2:.2f}x")


if __name__ == "__main__":
    main()
