"""engine-workers: the in-process engine's round on 1 process against 2 Ray workers (one run each).

1. FedAvg, CNN on digits, 20 clients (IID), one local epoch: one process vs ``engine-workers = 2``.
2. FedPeWS, MLP on digits, 20 clients, ``client-batch = 8``, warm-up rounds: one process (one
   batched executor) vs 2 workers (each batching its 10 clients).
Each run has ``--rounds`` rounds; the numbers are means over rounds 2.. (round 1 includes the
workers' imports and data loading): the **train phase** (the round's train messages sent and every
reply back: the part the workers parallelise) and the whole round (the row's ``seconds``: train
phase, aggregation, the server's central evaluation, metrics row and checkpoint, which stay in the
driver). Also the CPU seconds used during the train phase by the driver, each worker and Ray's own
processes (GCS, raylet, ...): where the time goes. The runs share one local Ray (2 CPUs, its
workers at this process's priority, as `fedapp run` starts it), started before them and not
counted. Prints the machine's load average: on a shared machine the ratio is contended.

The **ceiling** (CNN only): what two cores give two plain processes on the same work, no Ray and no
driver. Round 2's train messages, captured from the one-process run, are delivered to the same
ClientApp by one fresh process (all 20) and by two at once (10 each, the workers' shares), after
one warm-up delivery each; the median of 3 timings. The gap between the ceiling and the workers'
ratio is what shipping messages and replies through Ray, and the driver, cost.
Usage: python bench/engine_workers.py [--clients 20] [--epochs 1 [5 ...]] [--rounds 6] [--only cnn|pews] [--no-ceiling]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ray  # noqa: E402
from flwr.app import Message, MessageType  # noqa: E402

from fedapp.engine.ray_workers import start_local_ray  # noqa: E402
from fedapp.server.loop import serve  # noqa: E402
from fedapp.sim.run_local import full_config, make_grid  # noqa: E402
from tests.deploy_harness import descendants  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread), 0 where it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


@dataclass
class Timed:
    """Means over rounds 2.. of one run: train phase and round wall seconds, and the CPU seconds
    spent during the train phase by the driver, each worker and Ray's own processes (GCS, raylet, ...)."""

    phase: float
    round: float
    driver: float
    workers: list[float]
    ray: float


def timed_run(cfg: dict[str, Any], capture: list[Message] | None = None) -> Timed:
    """One run (as ``run_local`` does it), timed; ``capture`` gets round 2's train messages."""
    from fedapp.client_app import app

    raw = full_config(cfg)
    grid = make_grid(app, raw, int(cfg["num-clients"]), None)
    workers = [slot.pid for slot in getattr(grid, "slots", [])]
    ray_own = [pid for pid in descendants(os.getpid()) if pid not in workers]
    phases: list[tuple[float, float, list[float], float]] = []
    send = grid.send_and_receive

    def timed(messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        before = [cpu_seconds(pid) for pid in (os.getpid(), *workers, *ray_own)]
        start = time.perf_counter()
        replies = send(messages, timeout=timeout)
        wall = time.perf_counter() - start
        used = [cpu_seconds(pid) - b for pid, b in zip((os.getpid(), *workers, *ray_own), before, strict=True)]
        if messages and messages[0].metadata.message_type == MessageType.TRAIN:
            if capture is not None and len(phases) == 1:
                capture.extend(messages)
            phases.append((wall, used[0], used[1 : 1 + len(workers)], sum(used[1 + len(workers) :])))
        return replies

    grid.send_and_receive = timed  # type: ignore[method-assign]
    try:
        run = serve(grid, raw, base=Path.cwd())
    finally:
        grid.close()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    later = phases[1:]
    return Timed(
        statistics.mean(p[0] for p in later), statistics.mean(r["seconds"] for r in rows[1:]), statistics.mean(p[1] for p in later),
        [statistics.mean(p[2][i] for p in later) for i in range(len(workers))], statistics.mean(p[3] for p in later),
    )  # fmt: skip


def deliver_share(raw: dict[str, Any], path: str, share: list[int], ready: Any, go: Any, out: Any) -> None:
    """In a fresh process: the ClientApp's deliveries of the captured messages at ``share``, timed 3 times."""
    import logging

    from fedapp.client_app import app
    from fedapp.engine.local_grid import LocalGrid

    logging.disable(logging.CRITICAL)
    messages = pickle.loads(Path(path).read_bytes())
    grid = LocalGrid(app, raw, int(raw["num-clients"]), None)
    mine = [messages[i] for i in share]
    grid._deliver(mine[0])  # imports, data, the first step's allocations
    ready.put(True)
    go.wait()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for msg in mine:
            grid._deliver(msg)
        times.append(time.perf_counter() - start)
    out.put(statistics.median(times))


def ceiling(raw: dict[str, Any], path: str, count: int, processes: int) -> float:
    """Seconds for the ``count`` messages pickled at ``path`` delivered by ``processes`` plain processes at once."""
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [list(range(i, count, processes)) for i in range(processes)]
    procs = [ctx.Process(target=deliver_share, args=(raw, path, share, ready, go, out)) for share in shares]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=600)
    go.set()
    seconds = max(out.get(timeout=600) for _ in procs)
    for proc in procs:
        proc.join()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--epochs", type=int, nargs="+", default=[1], help="local epochs, a run pair each (more: more training-bound)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds per run; the means are over rounds 2..")
    ap.add_argument("--only", choices=("cnn", "pews"), help="one workload")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the plain-process ceiling")
    args = ap.parse_args()
    common = {"dataset": "digits", "partition": "iid", "num-clients": args.clients, "num-server-rounds": args.rounds, "lr": 0.05}
    loads = {
        "cnn": ("FedAvg CNN, client-batch 1", {**common, "model": "cnn"}),
        "pews": ("FedPeWS MLP, client-batch 8", {**common, "method": "fedpews", "mlp-hidden": "64,64", "warmup-fraction": 1.0,
                                                 "client-batch": 8}),
    }  # fmt: skip
    print(f"load average before: {os.getloadavg()}")
    start_local_ray(2)
    results: list[tuple[str, dict[int, Timed], tuple[float, float] | None]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for epochs in args.epochs:
                for key, (label, base) in loads.items():
                    if args.only and key != args.only:
                        continue
                    name, cfg = f"{label}, {epochs} epoch(s)", {**base, "local-epochs": epochs}
                    times: dict[int, Timed] = {}
                    captured: list[Message] = []
                    for workers in (1, 2):
                        start = time.perf_counter()
                        run_dir = str(Path(tmp) / f"{key}-{epochs}-{workers}")
                        t = times[workers] = timed_run(
                            {**cfg, "engine-workers": workers, "run-dir": run_dir}, captured if workers == 1 else None
                        )
                        cpu = " + ".join(f"{c:.3f}" for c in [t.driver, *t.workers, t.ray])
                        print(
                            f"{name}: {workers} worker(s): train phase {t.phase:.3f} s, round {t.round:.3f} s; train-phase CPU s "
                            f"(driver{' + workers' if t.workers else ''} + Ray's own) {cpu} (run {time.perf_counter() - start:.1f} s)"
                        )
                    plain = None
                    if key == "cnn" and not args.no_ceiling:
                        raw = full_config({**cfg, "run-dir": str(Path(tmp) / "unused")})
                        path = Path(tmp) / "messages.pkl"
                        path.write_bytes(pickle.dumps(captured))
                        plain = (ceiling(raw, str(path), len(captured), 1), ceiling(raw, str(path), len(captured), 2))
                        print(f"{name}: plain processes, the same deliveries: 1 process {plain[0]:.3f} s, 2 at once {plain[1]:.3f} s")
                    results.append((name, times, plain))
    finally:
        ray.shutdown()
    print(f"load average after: {os.getloadavg()}")
    for name, times, plain in results:
        one, two = times[1], times[2]
        line = (
            f"{name}: train phase {one.phase:.3f} s vs {two.phase:.3f} s: {one.phase / two.phase:.2f}x; "
            f"round {one.round:.3f} s vs {two.round:.3f} s: {one.round / two.round:.2f}x"
        )
        print(line + (f"; ceiling (plain processes) {plain[0] / plain[1]:.2f}x" if plain else ""))


if __name__ == "__main__":
    main()
