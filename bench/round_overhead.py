"""What a federated round costs beyond its training, measured in one run.

1. FedAvg, ``--clients`` clients, CNN on digits (Dirichlet 0.5), 1 local epoch, ``--rounds``
   rounds: a plain PyTorch loop doing the same work (same client data, batch size, SGD,
   weighted average, central evaluation; one thread) against the in-process engine
   (`fedapp run`), alternated ``--pairs`` times (the ratio is the median of the pairs'),
   and `flwr run` (Ray, one CPU per client worker) against the plain loop just before and
   after it. Rounds: the median of rounds 2.. (round 1 pays the imports).
2. Where the in-process round's extra time goes: time inside the ClientApp minus the
   clients' own training time (per message: model built, global decoded, run-config
   resolved, data sliced, reply encoded; a cProfile pass names the biggest items) and the
   server's share (round time minus time in the ClientApp: sampling, encoding,
   aggregation, central evaluation, metrics row).
3. FedSelect (synthetic-32k, MLP, FedSelect's shard split with 20 training samples per
   client, the rest of its shards its local test set) with ``--trained`` clients trained
   per round (the same work per trained client at any N), at N = 100 and N = 1000: the
   round time with the default
   personalised evaluation (every client, every round) and with
   personalized-eval-every = the number of rounds (only the last round evaluates; the
   median is over rounds 2 .. R-1).

An older checkout is measured by copying this file into its bench/ and running it there.

    PYTHONPATH=. python bench/round_overhead.py [--rounds 10] [--clients 10] [--pairs 3] [--skip-flwr] [--skip-fedselect] [--skip-fedavg]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from flwr.app import Message, MessageType
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedapp.client_app import app as client_app  # noqa: E402
from fedapp.core.config import ConfigError  # noqa: E402
from fedapp.core.runtime import configure_threads  # noqa: E402
from fedapp.data import client_data, dataset_for  # noqa: E402
from fedapp.engine.local_grid import LocalGrid  # noqa: E402
from fedapp.methods.registry import resolve  # noqa: E402
from fedapp.models import build_model  # noqa: E402
from fedapp.server.loop import serve  # noqa: E402
from fedapp.sim.run_local import full_config  # noqa: E402
from tests.flwr_harness import flwr_run, stop_all  # noqa: E402


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def later_median(seconds: Iterable[float], drop_last: bool = False) -> float:
    s = list(seconds)[1:]
    return statistics.median(s[:-1] if drop_last else s)


def plain_rounds(cfg_raw: dict[str, Any], rounds: int) -> list[float]:
    """FedAvg written as a plain PyTorch loop over the same client data; seconds per round."""
    cfg = resolve(full_config(cfg_raw))[0]
    configure_threads(1)
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed)
    data = [client_data(cfg, pid) for pid in range(cfg.num_clients)]
    tensors = [(torch.from_numpy(d.x_train), torch.from_numpy(d.y_train)) for d in data]
    x_test, y_test = torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test)
    glob = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    loss_fn = nn.CrossEntropyLoss()
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        total = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in glob.items()}
        n_all = 0
        for x, y in tensors:
            model.load_state_dict(glob)
            opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
            model.train()
            for idx in torch.randperm(x.shape[0], generator=gen).split(cfg.batch_size):
                opt.zero_grad()
                loss_fn(model(x[idx]), y[idx]).backward()
                opt.step()
            for k, v in model.state_dict().items():
                total[k] += v.double() * x.shape[0]
            n_all += x.shape[0]
        glob = {k: (v / n_all).to(glob[k].dtype) for k, v in total.items()}
        model.load_state_dict(glob)
        model.eval()
        with torch.no_grad():
            float((model(x_test).argmax(1) == y_test).float().mean())
        out.append(time.perf_counter() - start)
    return out


class TimingGrid(LocalGrid):
    """LocalGrid recording, per round, the time inside the ClientApp and the clients' reported training time."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.in_app: dict[int, float] = {}
        self.training: dict[int, float] = {}
        self.messages: dict[int, int] = {}

    def _deliver(self, msg: Message) -> Message:
        start = time.perf_counter()
        reply = super()._deliver(msg)
        if msg.metadata.message_type in (MessageType.TRAIN, MessageType.EVALUATE):
            rnd = int(msg.metadata.group_id)
            self.in_app[rnd] = self.in_app.get(rnd, 0.0) + time.perf_counter() - start
            self.messages[rnd] = self.messages.get(rnd, 0) + 1
            if not reply.has_error() and msg.metadata.message_type == MessageType.TRAIN:
                self.training[rnd] = self.training.get(rnd, 0.0) + float(reply.content["metrics"]["train-seconds"])  # type: ignore[index,arg-type]
        return reply


def in_process(
    cfg_raw: dict[str, Any], run_dir: Path, profile: bool = False
) -> tuple[list[dict[str, Any]], TimingGrid, pstats.Stats | None]:
    raw = full_config({**cfg_raw, "run-dir": str(run_dir)})
    grid = TimingGrid(client_app, raw, int(raw["num-clients"]))
    prof = cProfile.Profile() if profile else None
    if prof is not None:
        prof.enable()
    out = rows(serve(grid, raw, discovery_timeout=5))
    if prof is not None:
        prof.disable()
    return out, grid, pstats.Stats(prof) if prof is not None else None


def cumulative(stats: pstats.Stats, where: str, name: str) -> float:
    """Cumulative seconds of the functions called ``name`` defined in a file ending with ``where``."""
    return sum(v[3] for (file, _, func), v in stats.stats.items() if func == name and file.endswith(where))  # type: ignore[attr-defined]


def section(title: str) -> None:
    print(f"\n== {title}")


def fedavg_part(args: argparse.Namespace, tmp: Path) -> None:
    cfg = {
        "dataset": "digits", "model": "cnn", "partition": "dirichlet", "dirichlet-alpha": 0.5,
        "num-clients": args.clients, "num-server-rounds": args.rounds, "local-epochs": 1, "lr": 0.05,
    }  # fmt: skip
    plain: list[float] = []
    local: list[float] = []
    local_rows: list[dict[str, Any]] = []
    grid: TimingGrid | None = None
    for pair in range(args.pairs):  # alternated, so a load swing hits both
        plain.append(later_median(plain_rounds(cfg, args.rounds)))
        local_rows, grid, _ = in_process(cfg, tmp / f"local-{pair}")
        local.append(later_median(r["seconds"] for r in local_rows))
    assert grid is not None
    ratios = [a / b for a, b in zip(local, plain, strict=True)]
    flwr = float("nan")
    if not args.skip_flwr:
        proc = flwr_run(tmp, {**cfg, "run-dir": str(tmp / "flwr")}, num_supernodes=args.clients, timeout=1800)
        if not (tmp / "flwr" / "metrics.jsonl").exists():
            sys.exit(f"flwr run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        flwr = later_median(r["seconds"] for r in rows(tmp / "flwr"))
        plain_after = later_median(plain_rounds(cfg, args.rounds))
    section(f"FedAvg, {args.clients} clients, CNN on digits, {args.rounds} rounds: median round (rounds 2..)")
    print("plain PyTorch loop  " + ", ".join(f"{x:.3f}" for x in plain) + " s")
    print("in-process engine   " + ", ".join(f"{x:.3f}" for x in local) + " s")
    print(f"in-process / plain: {', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}  (goal <= 1.1)")
    if not args.skip_flwr:
        around = (plain[-1] + plain_after) / 2
        print(f"flwr run (Ray)      {flwr:.3f} s against the plain loop just before/after ({plain[-1]:.3f}, {plain_after:.3f} s)")
        print(f"flwr run / plain: {flwr / around:.2f}  (goal <= 1.3)")

    later = range(2, args.rounds + 1)
    seconds = {r["round"]: r["seconds"] for r in local_rows}
    app = statistics.median(grid.in_app[r] for r in later)
    train = statistics.median(grid.training[r] for r in later)
    per_msg = statistics.median((grid.in_app[r] - grid.training[r]) / grid.messages[r] for r in later)
    server = statistics.median(seconds[r] - grid.in_app[r] for r in later)
    section("in-process round, attributed (median of rounds 2..)")
    print(f"round {statistics.median(seconds[r] for r in later):.3f} s = in ClientApp {app:.3f} s + server {server:.3f} s")
    print(f"in ClientApp: training {train:.3f} s + per-message overhead {per_msg * 1000:.1f} ms x {args.clients} messages")

    _, _, stats = in_process({**cfg, "num-server-rounds": 4}, tmp / "profiled", profile=True)
    assert stats is not None
    n_msgs = 4 * args.clients
    items = [
        ("model built (build_model)", "fedapp/models/__init__.py", "build_model"),
        ("global decoded into the model (load_global)", "fedapp/client/handlers.py", "load_global"),
        ("run-config resolved (resolve)", "fedapp/methods/registry.py", "resolve"),
        ("client data sliced (client_data)", "fedapp/data/__init__.py", "client_data"),
        ("reply encoded (wire.encode)", "fedapp/core/wire.py", "encode"),
        ("server: aggregation (masked_mean)", "fedapp/core/aggregate.py", "masked_mean"),
        ("server: reply decoding (MaskedStrategy.decode)", "fedapp/server/strategy.py", "decode"),
        ("server: central evaluation (central_eval)", "fedapp/server/session.py", "central_eval"),
    ]
    section("cProfile, 4 rounds (profiler overhead included): cumulative time per train message, per round for server items")
    for label, where, name in items:
        total = cumulative(stats, where, name)
        per = total / 4 if label.startswith("server") else total / n_msgs
        print(f"{label:<48} {per * 1000:7.2f} ms")


def fedselect_part(args: argparse.Namespace, tmp: Path) -> None:
    section(f"FedSelect, {args.trained} clients trained per round, synthetic-32k shards (20 samples each), MLP: median round")
    print(f"{'personalised evaluation':<34}{'N = 100':>10}{'N = 1000':>10}{'ratio':>8}")
    for label, every in (("every client, every round", 1), ("last round only (eval-every=R)", args.rounds)):
        med = []
        for n in (100, 1000):
            cfg = {
                "method": "fedselect", "dataset": "synthetic-32k", "partition": "shard", "classes-per-client": 2, "samples-per-client": 20,
                "num-clients": n, "fraction-train": args.trained / n, "local-alt-epochs": 1, "num-server-rounds": args.rounds,
            }  # fmt: skip
            if every > 1:
                cfg["personalized-eval-every"] = every
            try:
                out, _, _ = in_process(cfg, tmp / f"fedselect-{n}-{every}")
            except ConfigError as err:  # an older checkout without personalized-eval-every
                print(f"{label:<34} not run: {err}"[:120])
                break
            med.append(later_median((r["seconds"] for r in out), drop_last=every > 1))
        else:
            print(f"{label:<34}{med[0]:>9.3f}s{med[1]:>9.3f}s{med[1] / med[0]:>8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--trained", type=int, default=10, help="FedSelect: clients trained per round")
    ap.add_argument("--pairs", type=int, default=3, help="plain loop / in-process runs, alternated")
    ap.add_argument("--skip-flwr", action="store_true")
    ap.add_argument("--skip-fedselect", action="store_true")
    ap.add_argument("--skip-fedavg", action="store_true")
    args = ap.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)  # the rounds' log lines would bury the tables
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if not args.skip_fedavg:
                fedavg_part(args, Path(tmp))
            if not args.skip_fedselect:
                fedselect_part(args, Path(tmp))
    finally:
        stop_all()  # the SuperLink `flwr run` started for the app copy, and the copy
    print(f"\n(bench wall time {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
