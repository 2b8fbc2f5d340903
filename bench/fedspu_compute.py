"""Local training seconds by active fraction p: FedSPU (full model, frozen gradients
masked) against a dropout sub-model (FjORD/FedDrop: dropped neurons cut out), measured
in one process with the clients' own code (local_train, extract_submodel).

Each (model, p, method) cell is timed ``repeats`` times in shuffled order, one thread,
as process CPU seconds (the shared 2-core machine makes wall time swing with other
users' load); the table gives the median for ``steps`` minibatch steps and its ratio
to p = 1. Sub-model times include cutting the sub-model out.

    nice -n 10 env PYTHONPATH=. .venv/bin/python bench/fedspu_compute.py [repeats] [steps]
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

from fedapp.core.masks import model_param_masks, neuron_layout
from fedapp.core.runtime import configure_threads
from fedapp.core.train import TrainSettings, local_train
from fedapp.methods.submodel import extract_submodel
from fedapp.methods.tiers import random_neurons
from fedapp.models.fedspu_cnn import cifar_cnn, emnist_cnn
from fedapp.models.mlp import mlp

TIERS = (0.2, 0.4, 0.6, 0.8, 1.0)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int, int]] = {
    # name: (builder, input shape, classes, batch size)
    "digits MLP 64-64-32-10, B=16": (lambda: mlp(64, (64, 32), 10), (64,), 10, 16),
    "EMNIST CNN 1x28x28, B=16": (lambda: emnist_cnn((1, 28, 28), 62), (1, 28, 28), 62, 16),
    "CIFAR-10 CNN 3x32x32, B=128": (lambda: cifar_cnn((3, 32, 32), 10), (3, 32, 32), 10, 128),
}


def time_once(name: str, p: float, method: str, steps: int) -> float:
    build, shape, classes, batch = MODELS[name]
    torch.manual_seed(0)
    model = build()
    x, y = torch.randn(batch * 4, *shape), torch.randint(0, classes, (batch * 4,))
    neurons = random_neurons(neuron_layout(model).widths, p, 1)
    settings = TrainSettings(epochs=0, steps=steps, batch_size=batch, lr=0.01)
    gen = torch.Generator().manual_seed(0)
    start = time.process_time()
    if method == "fedspu":
        params = dict(model.named_parameters())
        masks = {k: torch.from_numpy(m) for k, m in model_param_masks(model, neurons).items() if k in params}
        local_train(model, x, y, settings, gen, masks)
    else:
        local_train(extract_submodel(model, neurons)[0], x, y, settings, gen)
    return time.process_time() - start


def main(repeats: int = 7, steps: int = 40) -> None:
    configure_threads(1)
    for name in MODELS:
        cells = [(p, m) for p in TIERS for m in ("fedspu", "sub-model")]
        times: dict[tuple[float, str], list[float]] = {c: [] for c in cells}
        time_once(name, 1.0, "fedspu", steps)  # warm-up
        for _ in range(repeats):
            random.shuffle(cells)
            for p, m in cells:
                times[(p, m)].append(time_once(name, p, m, steps))
        med = {c: statistics.median(v) for c, v in times.items()}
        print(f"\n{name}: median CPU seconds for {steps} steps ({repeats} repeats), ratio to p = 1\n")
        print("| p | FedSPU (masked full model) | ratio | sub-model (FjORD/FedDrop) | ratio |\n|---|---|---|---|---|")
        for p in TIERS:
            a, b = med[(p, "fedspu")], med[(p, "sub-model")]
            print(f"| {p:g} | {a:.4f} | {a / med[(1.0, 'fedspu')]:.2f} | {b:.4f} | {b / med[(1.0, 'sub-model')]:.2f} |")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
