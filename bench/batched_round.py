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
Each cell is warmed up once on 2 clients, then timed ``--repeats`` times (median): on a
GPU in wall seconds; on CPU in process CPU seconds (one thread by default), which a
shared, loaded machine disturbs far less than wall time.

    nice -n 10 env PYTHONPATH=. .venv/bin/python bench/batched_round.py --device cpu --clients 10
    PYTHONPATH=. .venv/bin/python bench/batched_round.py --device cuda          # 50 clients
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedapp.batched.train import ClientWork, train_clients
from fedapp.models.cnn import cnn
from fedapp.models.mlp import mlp
from fedapp.runtime import configure_threads
from fedapp.train import TrainSettings, local_train

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


def sequential(model: nn.Module, data: Data, device: torch.device) -> list[dict[str, torch.Tensor]]:
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    work = copy.deepcopy(model).to(device)
    out = []
    for i, (x, y) in enumerate(data):
        work.load_state_dict(start)
        local_train(work, x, y, SETTINGS, gen(i))
        out.append({k: v.detach().clone() for k, v in work.state_dict().items()})
    sync(device)
    return out


def batched(model: nn.Module, data: Data, device: torch.device) -> list[dict[str, torch.Tensor]]:
    works = [ClientWork(x, y, gen(i)) for i, (x, y) in enumerate(data)]
    outcomes = train_clients(model, works, SETTINGS, device, client_batch=len(works))
    sync(device)
    return [o.state for o in outcomes]


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated names of " + " | ".join(MODELS))
    args = ap.parse_args()
    configure_threads(args.threads)
    device = torch.device(args.device)
    on_cpu = device.type == "cpu"
    name = f"cpu, {args.threads} thread(s)" if on_cpu else torch.cuda.get_device_name(device)
    clock = time.process_time if on_cpu else time.perf_counter
    print(
        f"{args.clients} clients x {args.samples} samples, 1 epoch, batch 32, SGD lr 0.01, on {name}; "
        f"median of {args.repeats}, {'process CPU' if on_cpu else 'wall'} seconds"
    )
    print(f"{'model':30} {'sequential s':>12} {'batched s':>10} {'floor s':>8} {'seq/batched':>11} {'batched/floor':>13} {'max |dw|':>9}")
    for label in args.models.split(","):
        build, shape, classes = MODELS[label]
        torch.manual_seed(0)
        model = build().to(device)
        small, data = client_data(shape, classes, 2, args.samples, device), client_data(shape, classes, args.clients, args.samples, device)
        for fn in (sequential, batched, floor):  # warm-up: lazy init, kernel selection
            fn(model, small, device)
        seq_s, seq = timed(lambda: sequential(model, data, device), args.repeats, clock)  # noqa: B023
        bat_s, bat = timed(lambda: batched(model, data, device), args.repeats, clock)  # noqa: B023
        floor_s, _ = timed(lambda: floor(model, data, device), args.repeats, clock)  # noqa: B023
        gap = max((a[k] - b[k]).abs().max().item() for a, b in zip(seq, bat, strict=True) for k in a)  # type: ignore[call-overload]
        print(f"{label:30} {seq_s:12.3f} {bat_s:10.3f} {floor_s:8.3f} {seq_s / bat_s:11.2f} {bat_s / floor_s:13.2f} {gap:9.1e}")


if __name__ == "__main__":
    main()
