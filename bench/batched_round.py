"""One round of local training for many clients: one after another (``local_train``, what
``client-batch = 1`` does) against the batched kernel (``fedapp.batched``) and a bare
``vmap(grad)`` floor, in one run, on one device.

Workload (the batched-executor issue's): N clients x 512 samples, one epoch, batch 32,
plain SGD, the project's ``cnn`` on 3x32x32 (10 classes) and the FedPeWS synthetic MLP
(5-32-64-128-32-4). Data are random tensors, already on the device (as a client's
cached data would be). Sequential resets one model per client from the global state,
as the engine's one-model-per-process client does. The floor is vmap(grad(mean CE)) and
p -= lr*g on stacked weights with every client's minibatches pre-stacked: no masks,
optimizer state, idle-step handling, loss statistics or per-client generators.
``--augment crop-flip`` (or ``flip-rotate-crop``) has sequential and batched training augment
every minibatch (``fedapp.data.augment``, black = -1 per channel, as Normalize(0.5, 0.5)
gives); image models only; the floor never augments. ``--count-ops`` prints instead the aten
operations the batched kernel dispatches per step inside its step loop (from its first
vmapped call; (count at 6 steps - count at 2) / 4), a measure of per-step work free of timing noise.
Each cell is warmed up once on 2 clients, then timed ``--repeats`` times (median): on a
GPU in wall seconds; on CPU in process CPU seconds (one thread by default), which a
shared, loaded machine disturbs far less than wall time.

``--engine`` times whole in-process engine rounds instead (``fedapp.engine``, FedAvg, the same
models and clients): run-config ``client-batch = 1`` against ``client-batch = clients``, each
a 2-round run from a fresh process cache; it reports the second round's train phase (the
round's train messages in and replies out: decoding, the clients' local training, state,
reply encoding), wall and process CPU seconds, and the largest gap of the final weights.
Data: the FedPeWS synthetic set (32,000 training samples) split IID, and CIFAR-10-format
files of random images written to a temporary data-root (512 per client), no augmentation.

    nice -n 10 env PYTHONPATH=. .venv/bin/python bench/batched_round.py --device cpu --clients 10
    nice -n 10 env PYTHONPATH=. .venv/bin/python bench/batched_round.py --device cpu --clients 8 --samples 128 \
        --models "cnn 3x32x32" --augment crop-flip
    PYTHONPATH=. .venv/bin/python bench/batched_round.py --device cuda          # 50 clients
    nice -n 10 env PYTHONPATH=. .venv/bin/python bench/batched_round.py --engine --device cpu   # 50 clients
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
from flwr.app import MessageType
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils._python_dispatch import TorchDispatchMode

import fedapp.batched.train as batched_train
from fedapp.batched.train import ClientWork, train_clients
from fedapp.client.cache import clear_caches
from fedapp.core.runtime import configure_threads
from fedapp.core.train import Augment, TrainSettings, local_train
from fedapp.data.augment import make_augment
from fedapp.engine.local_grid import LocalGrid
from fedapp.models.cnn import cnn
from fedapp.models.mlp import mlp
from fedapp.server.loop import serve
from fedapp.sim.run_local import full_config

MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int]] = {
    "cnn 3x32x32": (lambda: cnn((3, 32, 32), 10), (3, 32, 32), 10),
    "fedpews mlp 5-32-64-128-32-4": (lambda: mlp(5, (32, 64, 128, 32), 4), (5,), 4),
}
SETTINGS = TrainSettings(epochs=1, steps=0, batch_size=32, lr=0.01)

Data = list[tuple[torch.Tensor, torch.Tensor]]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def client_data(shape: tuple[int, ...], classes: int, clients: int, samples: int, device: torch.device) -> Data:
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randn(samples, *shape, generator=g).to(device), torch.randint(0, classes, (samples,), generator=g).to(device))
        for _ in range(clients)
    ]


def gen(i: int) -> torch.Generator:
    return torch.Generator().manual_seed(10_007 + i)


def sequential(model: nn.Module, data: Data, device: torch.device, augment: Augment | None = None) -> list[dict[str, torch.Tensor]]:
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    work = copy.deepcopy(model).to(device)
    out = []
    for i, (x, y) in enumerate(data):
        work.load_state_dict(start)
        local_train(work, x, y, SETTINGS, gen(i), augment=augment)
        out.append({k: v.detach().clone() for k, v in work.state_dict().items()})
    sync(device)
    return out


def batched(model: nn.Module, data: Data, device: torch.device, augment: Augment | None = None) -> list[dict[str, torch.Tensor]]:
    works = [ClientWork(x, y, gen(i), augment=augment) for i, (x, y) in enumerate(data)]
    outcomes = train_clients(model, works, SETTINGS, device, client_batch=len(works))
    sync(device)
    return [o.state for o in outcomes]


def loop_ops(model: nn.Module, data: Data, device: torch.device, augment: Augment | None) -> float:
    """aten operations per step inside the batched kernel's step loop (``--count-ops``)."""
    counted = {"on": False, "n": 0}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            counted["n"] += counted["on"]
            return func(*args, **(kwargs or {}))

    def marking_vmap(fn: Any, *a: Any, **k: Any) -> Any:
        batched_fn = vmap(fn, *a, **k)

        def call(*args: Any, **kwargs: Any) -> Any:
            counted["on"] = True
            return batched_fn(*args, **kwargs)

        return call

    def ops(steps: int) -> int:
        counted.update(on=False, n=0)
        works = [ClientWork(x, y, gen(i), augment=augment) for i, (x, y) in enumerate(data)]
        with mock.patch.object(batched_train, "vmap", marking_vmap), Count():
            train_clients(model, works, replace(SETTINGS, epochs=0, steps=steps), device)
        return counted["n"]

    return (ops(6) - ops(2)) / 4


def floor(model: nn.Module, data: Data, device: torch.device) -> None:
    """vmap(grad) and a plain SGD step, nothing else."""
    params = {n: p.detach().to(device).unsqueeze(0).repeat(len(data), *([1] * p.dim())) for n, p in model.named_parameters()}
    x, y = torch.stack([d[0] for d in data]), torch.stack([d[1] for d in data])
    perm = torch.stack([torch.randperm(x.shape[1], generator=gen(i)) for i in range(len(data))]).to(device)
    x, y = x[torch.arange(len(data), device=device)[:, None], perm], y.gather(1, perm)  # each client's epoch order

    def loss(p: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, p, (xb,)), yb)

    step = vmap(grad(loss))
    names = list(params)
    for k in range(0, x.shape[1], SETTINGS.batch_size):
        grads = step(params, x[:, k : k + SETTINGS.batch_size], y[:, k : k + SETTINGS.batch_size])
        torch._foreach_add_([params[n] for n in names], [grads[n] for n in names], alpha=-SETTINGS.lr)
    sync(device)


def timed(fn: Callable[[], object], repeats: int, clock: Callable[[], float]) -> tuple[float, object]:
    """Median seconds over ``repeats`` calls, and the last call's result."""
    times, result = [], None
    for _ in range(repeats):
        t = clock()
        result = fn()
        times.append(clock() - t)
    return statistics.median(times), result


ENGINE: dict[str, dict[str, Any]] = {
    "cnn 3x32x32": {"dataset": "cifar10", "model": "cnn", "augment": "none"},
    "fedpews mlp 5-32-64-128-32-4": {"dataset": "synthetic-32k", "model": "mlp", "mlp-hidden": "32,64,128,32"},
}


class TrainTiming(LocalGrid):
    """LocalGrid timing each round's train messages (wall and process CPU seconds)."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.rounds: list[tuple[float, float]] = []

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> Any:
        messages = list(messages)
        wall, cpu = time.perf_counter(), time.process_time()
        replies = super().send_and_receive(messages, timeout=timeout)
        if messages and messages[0].metadata.message_type == MessageType.TRAIN:
            self.rounds.append((time.perf_counter() - wall, time.process_time() - cpu))
        return replies


def engine_round(over: dict[str, Any], client_batch: int, run_dir: Path) -> tuple[float, float, dict[str, np.ndarray]]:
    from fedapp.client_app import app as client_app

    clear_caches()
    raw = full_config({**over, "client-batch": client_batch, "run-dir": str(run_dir), "overwrite": True})
    grid = TrainTiming(client_app, raw, int(raw["num-clients"]))
    try:
        out = serve(grid, raw, discovery_timeout=30)
    finally:
        grid.close()
    with np.load(out / "model.npz") as z:
        weights = {k: z[k] for k in z.files}
    return *grid.rounds[-1], weights


def engine_main(args: argparse.Namespace) -> None:
    from tests.data_files import write_cifar10

    print(
        f"in-process engine, FedAvg, {args.clients} clients, 1 epoch, batch 32, SGD lr 0.01, on {args.device}; "
        "round 2's train phase, wall and process CPU seconds"
    )
    head = f"{'cb=1 wall':>9} {'cb=N wall':>9} {'ratio':>6} {'cb=1 cpu':>8} {'cb=N cpu':>8} {'ratio':>6}"
    print(f"{'model':30} {'samples':>7} {head} {'max |dw|':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_cifar10(root / "data", args.samples * args.clients // 10, 20)
        common = {
            "num-clients": args.clients, "partition": "iid", "num-server-rounds": 2, "local-epochs": 1, "batch-size": 32,
            "lr": 0.01, "energy-meter": "none", "device": args.device, "num-threads": args.threads, "data-root": str(root / "data"),
        }  # fmt: skip
        for label in args.models.split(","):
            over = {**common, **ENGINE[label]}
            one_wall, one_cpu, one = engine_round(over, 1, root / "cb1")
            many_wall, many_cpu, many = engine_round(over, args.clients, root / "cbN")
            gap = max(float(np.abs(one[k] - many[k]).max()) for k in one)
            samples = 32_000 // args.clients if ENGINE[label]["dataset"] == "synthetic-32k" else args.samples
            print(
                f"{label:30} {samples:7d} {one_wall:9.3f} {many_wall:9.3f} {one_wall / many_wall:6.2f} "
                f"{one_cpu:8.3f} {many_cpu:8.3f} {one_cpu / many_cpu:6.2f} {gap:9.1e}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated names of " + " | ".join(MODELS))
    ap.add_argument("--engine", action="store_true", help="whole engine rounds, client-batch 1 against --clients")
    ap.add_argument("--augment", default="none", choices=["none", "crop-flip", "flip-rotate-crop"], help="augment each minibatch")
    ap.add_argument("--count-ops", action="store_true", help="aten operations per step in the batched step loop, no timing")
    args = ap.parse_args()
    if args.engine and args.augment != "none":
        ap.error(f"--augment {args.augment} is for the kernel bench, not --engine")
    configure_threads(args.threads)
    if args.engine:
        engine_main(args)
        return
    device = torch.device(args.device)
    on_cpu = device.type == "cpu"
    name = f"cpu, {args.threads} thread(s)" if on_cpu else torch.cuda.get_device_name(device)
    clock = time.process_time if on_cpu else time.perf_counter
    print(
        f"{args.clients} clients x {args.samples} samples, 1 epoch, batch 32, SGD lr 0.01, augment {args.augment}, on {name}; "
        f"median of {args.repeats}, {'process CPU' if on_cpu else 'wall'} seconds"
    )
    print(f"{'model':30} {'sequential s':>12} {'batched s':>10} {'floor s':>8} {'seq/batched':>11} {'batched/floor':>13} {'max |dw|':>9}")
    for label in args.models.split(","):
        build, shape, classes = MODELS[label]
        if args.augment != "none" and len(shape) != 3:
            ap.error(f"--augment {args.augment} needs an image model; {label!r} takes inputs of shape {shape}")
        aug = None if args.augment == "none" else make_augment(args.augment, torch.full((shape[0],), -1.0, device=device))
        torch.manual_seed(0)
        model = build().to(device)
        if args.count_ops:
            ops = loop_ops(model, client_data(shape, classes, args.clients, args.samples, device), device, aug)
            print(f"{label}: {ops:.1f} aten operations per step in the batched step loop, {args.clients} clients, augment {args.augment}")
            continue
        small, data = client_data(shape, classes, 2, args.samples, device), client_data(shape, classes, args.clients, args.samples, device)
        for fn in (sequential, batched):  # warm-up: lazy init, kernel selection
            fn(model, small, device, aug)
        floor(model, small, device)
        seq_s, seq = timed(lambda: sequential(model, data, device, aug), args.repeats, clock)  # noqa: B023
        bat_s, bat = timed(lambda: batched(model, data, device, aug), args.repeats, clock)  # noqa: B023
        floor_s, _ = timed(lambda: floor(model, data, device), args.repeats, clock)  # noqa: B023
        gap = max((a[k] - b[k]).abs().max().item() for a, b in zip(seq, bat, strict=True) for k in a)  # type: ignore[call-overload]
        print(f"{label:30} {seq_s:12.3f} {bat_s:10.3f} {floor_s:8.3f} {seq_s / bat_s:11.2f} {bat_s / floor_s:13.2f} {gap:9.1e}")


if __name__ == "__main__":
    main()
