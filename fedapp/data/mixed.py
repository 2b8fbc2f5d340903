"""The FedPeWS mixed-source federations (../shared/specs/fedpews.md §4.3, D15).

- cifar-mnist: CIFAR-10 (labels 0-9) + MNIST (labels 10-19), MNIST resized 28 -> 32
  bilinearly and grey replicated to 3 channels; 400 train and 200 test images per class.
  Source ids: MNIST = 0, CIFAR = 1 (client 0 = MNIST under partition = "source").
- path-oct-tissue: PathMNIST (0-8), OCTMNIST (9-12), TissueMNIST (13-20), 28 -> 32,
  grey -> 3 channels, 400 / 200 per class; source ids Path = 0, OCT = 1, Tissue = 2.

Per-class draws are seeded by data-seed and capped at what a class has (with a warning).
Only the drawn images are kept: the full source sets are freed after building.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from fedapp.data.dataset import Dataset
from fedapp.data.source import Source

log = logging.getLogger("fedapp")

TRAIN_PER_CLASS = 400
TEST_PER_CLASS = 200
SIZE = 32


@dataclass(frozen=True)
class Part:
    source: Source
    group: int  # source id: the client that holds it under partition = "source"


def per_class(y: np.ndarray, num_classes: int, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """Sorted indices of ``n`` random samples of every class (all of a class that has fewer)."""
    chosen, short = [], {}
    for c in range(num_classes):
        idx = np.flatnonzero(y == c)
        if idx.size < n:
            short[c] = int(idx.size)
        chosen.append(rng.choice(idx, size=min(n, idx.size), replace=False))
    if short:
        log.warning("%s: %d class(es) have fewer than %d samples; using all of them: %s", what, len(short), n, short)
    return np.sort(np.concatenate(chosen))


def to_rgb(x: np.ndarray, size: int) -> np.ndarray:
    """uint8 (N, C, h, w) -> uint8 (N, 3, size, size): bilinear resize, grey replicated to 3 channels."""
    import torch
    from torchvision.transforms.functional import InterpolationMode, resize

    if x.shape[2:] != (size, size):
        x = resize(torch.from_numpy(x), [size, size], InterpolationMode.BILINEAR, antialias=True).numpy()
    return np.repeat(x, 3, axis=1) if x.shape[1] == 1 else x


def mixed(name: str, parts: list[Part], seed: int, root: str) -> Dataset:
    for p in parts:  # a missing file of any source stops us before reading anything
        p.source.require(root, name)
    xs_tr, ys_tr, xs_te, ys_te, groups = [], [], [], [], []
    offset = 0
    for part in parts:
        src = part.source
        x_tr, y_tr, x_te, y_te = src.load(root, name)
        rng = np.random.default_rng([seed, part.group])
        i_tr = per_class(y_tr, src.num_classes, TRAIN_PER_CLASS, rng, f"{name}/{src.name} train")
        i_te = per_class(y_te, src.num_classes, TEST_PER_CLASS, rng, f"{name}/{src.name} test")
        xs_tr.append(to_rgb(x_tr[i_tr], SIZE))
        xs_te.append(to_rgb(x_te[i_te], SIZE))
        ys_tr.append(y_tr[i_tr] + offset)
        ys_te.append(y_te[i_te] + offset)
        groups.append(np.full(i_tr.size, part.group, dtype=np.int64))
        offset += src.num_classes
        del x_tr, y_tr, x_te, y_te
    return Dataset(
        name,
        np.concatenate(xs_tr),
        np.concatenate(ys_tr),
        np.concatenate(xs_te),
        np.concatenate(ys_te),
        num_classes=offset,
        groups=np.concatenate(groups),
        default_normalize="train-stats",
        default_augment="none",
    )
