"""Local training seconds by active fraction p: FedSPU with its structured partial backward
(frozen neurons' gradients not computed, core/partial_backward.py), FedSPU with the masked
full backward it replaces, and a dropout sub-model (FjORD/FedDrop: dropped neurons cut
out), measured in one process with the clients' own code (local_train, extract_submodel).

Each (model, p, method) cell is timed ``repeats`` times in shuffled order, one thread,
as process CPU seconds (the shared 2-core machine makes wall time swing with other
users' load); the table gives the median for ``steps`` minibatch steps and its ratio
to p = 1. Sub-model times include cutting the sub-model out. Before timing, every
(model, p) is trained once both ways and the two models compared bit for bit (this also
runs the partial backward's first-shape check, which computes both backwards).

    nice -n 10 env PYTHONPATH=. .venv/bin/python bench/fedspu_compute.py [repeats] [steps] [model ...]

``pair`` as the first argument times only FedSPU at p = 0.2 (partial, then masked backward) and
at p = 1, in that fixed order, ``repeats`` times (the full grid also shuffles in the sub-models):

    nice -n 5 env PYTHONPATH=. .venv/bin/python bench/fedspu_compute.py pair [repeats] [steps] [model]
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from fedapp.core.masks import model_param_masks, neuron_layout
from fedapp.core.partial_backward import VERDICTS
from fedapp.core.runtime import configure_threads
from fedapp.core.train import TrainSettings, local_train
from fedapp.methods.submodel import extract_submodel
from fedapp.methods.tiers import random_neurons
from fedapp.models.fedspu_cnn import cifar_cnn, emnist_cnn
from fedapp.models.mlp import mlp

TIERS = (0.2, 0.4, 0.6, 0.8, 1.0)
METHODS = ("partial", "masked", "sub-model")
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int, int]] = {
    # name: (builder, input shape, classes, batch size)
    "mlp": (lambda: mlp(64, (64, 32), 10), (64,), 10, 16),
    "emnist": (lambda: emnist_cnn((1, 28, 28), 62), (1, 28, 28), 62, 16),
    "cifar10": (lambda: cifar_cnn((3, 32, 32), 10), (3, 32, 32), 10, 128),
}
TITLES = {"mlp": "digits MLP 64-64-32-10, B=16", "emnist": "EMNIST CNN 1x28x28, B=16", "cifar10": "CIFAR-10 CNN 3x32x32, B=128"}


def train_once(name: str, p: float, method: str, steps: int) -> tuple[float, nn.Module]:
    build, shape, classes, batch = MODELS[name]
    torch.manual_seed(0)
    model = build()
    x, y = torch.randn(batch * 4, *shape), torch.randint(0, classes, (batch * 4,))
    neurons = random_neurons(neuron_layout(model).widths, p, 1)
    settings = TrainSettings(epochs=0, steps=steps, batch_size=batch, lr=0.01, partial_backward=method == "partial")
    gen = torch.Generator().manual_seed(0)
    start = time.process_time()
    if method == "sub-model":
        local_train(extract_submodel(model, neurons)[0], x, y, settings, gen)
    else:
        params = dict(model.named_parameters())
        masks = {k: torch.from_numpy(m) for k, m in model_param_masks(model, neurons).items() if k in params}
        local_train(model, x, y, settings, gen, masks)
    return time.process_time() - start, model


def same_model(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return all(np.array_equal(sa[k].numpy().reshape(-1).view(np.uint8), sb[k].numpy().reshape(-1).view(np.uint8)) for k in sa)


def main(repeats: int = 7, steps: int = 40, names: tuple[str, ...] = tuple(MODELS)) -> None:
    """``names``: which of MODELS (mlp, emnist, cifar10) to measure."""
    configure_threads(1)
    for name in names:
        identical = all(same_model(train_once(name, p, "partial", steps)[1], train_once(name, p, "masked", steps)[1]) for p in TIERS)
        cells = [(p, m) for p in TIERS for m in METHODS]
        times: dict[tuple[float, str], list[float]] = {c: [] for c in cells}
        for _ in range(repeats):
            random.shuffle(cells)
            for p, m in cells:
                times[(p, m)].append(train_once(name, p, m, steps)[0])
        med = {c: statistics.median(v) for c, v in times.items()}
        print(f"\n{TITLES[name]}: median CPU seconds for {steps} steps ({repeats} repeats), ratio to p = 1")
        print(f"partial and masked backward give bit-identical models at every p: {'yes' if identical else 'NO'}")
        kept = sum(VERDICTS.values())
        print(f"shapes whose sliced kernels gave autograd's bits: {kept} of {len(VERDICTS)} (so far in this process)\n")
        print("| p | FedSPU partial backward | ratio | FedSPU masked backward | ratio | sub-model (FjORD/FedDrop) | ratio |")
        print("|---|---|---|---|---|---|---|")
        for p in TIERS:
            row = [f"{med[(p, m)]:.4f} | {med[(p, m)] / med[(1.0, m)]:.2f}" for m in METHODS]
            print(f"| {p:g} | " + " | ".join(row) + " |")


def pair(repeats: int, steps: int, name: str) -> None:
    configure_threads(1)
    cells = ((0.2, "partial"), (0.2, "masked"), (1.0, "partial"))
    for p, m in cells:
        train_once(name, p, m, steps)  # warm-up (and the partial backward's first-shape check)
    times: dict[tuple[float, str], list[float]] = {c: [] for c in cells}
    for _ in range(repeats):
        for p, m in cells:
            times[(p, m)].append(train_once(name, p, m, steps)[0])
    med = {c: statistics.median(v) for c, v in times.items()}
    base = med[(1.0, "partial")]
    print(f"{TITLES[name]}: median CPU seconds for {steps} steps ({repeats} repeats): p = 1 {base:.4f}")
    print(f"p = 0.2 partial backward {med[(0.2, 'partial')]:.4f} (ratio {med[(0.2, 'partial')] / base:.2f}), ", end="")
    print(f"masked backward {med[(0.2, 'masked')]:.4f} (ratio {med[(0.2, 'masked')] / base:.2f})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["pair"]:
        rest = sys.argv[2:]
        nums = [int(a) for a in rest if a.isdigit()]
        pair([*nums, 15][0], [*nums[1:], 40][0], next((a for a in rest if not a.isdigit()), "emnist"))
        sys.exit(0)
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    chosen = tuple(a for a in sys.argv[1:] if not a.isdigit()) or tuple(MODELS)
    main([*numbers, 7][0], [*numbers[1:], 40][0], chosen)
