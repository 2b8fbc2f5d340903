"""Measured cost of a FedPeWS warmup round against a FedAvg round, in one process.

A warmup step is a score step (forward + backward to the scores through the weight-masked
network) plus a weight step under a fresh mask; the spec (App. C.3) expects about 2x a plain
step. Both loops run the same minibatches from the same start, interleaved in alternating
order per repeat so machine load hits both alike; the ratio of medians is reported.

    PYTHONPATH=. nice -n 10 python bench/fedpews_warmup_cost.py --repeats 7
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import nn

from fedapp.core.masks import neuron_layout
from fedapp.core.runtime import configure_threads
from fedapp.core.train import TrainSettings, local_train
from fedapp.methods.pews_train import WarmupLoop
from fedapp.models.cnn import cnn
from fedapp.models.mlp import mlp

MODELS = {
    # the paper's FC net on Synthetic-32K (one client's 8,000 points, B 32) and its CNN on CIFAR-MNIST (B 64)
    "mlp": (lambda: mlp(5, (32, 64, 128, 32), 4), (5,), 4, 8000, 32),
    "cnn": (lambda: cnn((3, 32, 32), 20), (3, 32, 32), 20, 1024, 64),
}


def timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def measure(name: str, repeats: int) -> tuple[float, float]:
    build, shape, classes, n, batch = MODELS[name]
    torch.manual_seed(0)
    start_model: nn.Module = build()
    x, y = torch.randn(n, *shape), torch.randint(0, classes, (n,))
    settings = TrainSettings(epochs=1, steps=0, batch_size=batch, lr=0.01)
    layout = neuron_layout(start_model)
    pews = {"ref": None, "weight": 0.0, "lr": 0.1, "shared": False}

    def fedavg() -> None:
        local_train(copy.deepcopy(start_model), x, y, settings, torch.Generator().manual_seed(1))

    def warmup() -> None:
        loop = WarmupLoop(copy.deepcopy(start_model), layout, settings)
        loop.run(x, y, torch.zeros(layout.total), pews, torch.Generator().manual_seed(1))

    times: dict[str, list[float]] = {"fedavg": [], "warmup": []}
    for r in range(repeats + 1):
        order = [("fedavg", fedavg), ("warmup", warmup)][:: 1 if r % 2 else -1]
        for key, fn in order:
            t = timed(fn)
            if r > 0:  # repeat 0 warms up allocators and caches
                times[key].append(t)
    return statistics.median(times["fedavg"]), statistics.median(times["warmup"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default="mlp,cnn")
    args = parser.parse_args()
    configure_threads(1)
    print("| model | FedAvg round s (median) | warmup round s (median) | ratio |\n|---|---|---|---|")
    for name in args.models.split(","):
        avg, warm = measure(name, args.repeats)
        print(f"| {name} | {avg:.3f} | {warm:.3f} | {warm / avg:.2f} |", flush=True)


if __name__ == "__main__":
    main()
