"""Which normalisation and augmentation a run uses (run-config keys ``normalize`` and
``augment``; "auto" is the dataset's default, listed in docs/datasets.md).

Normalisations are per-channel (x / 255 - mean) / std:
- none: ToTensor only (FedSPU's EMNIST code); half: mean = std = 0.5 (FedSPU's CIFAR-10,
  medmnist's examples); imagenet: FedSelect's code; cifar100: Fling's constants (FedPart);
  train-stats: mean/std of the training set's pixels (FedPeWS's mixed sets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedapp.core.config import ConfigError
from fedapp.data.dataset import Dataset, Normalization

if TYPE_CHECKING:
    import torch

    from fedapp.core.train import Augment

FIXED: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "none": ((0.0,), (1.0,)),
    "half": ((0.5,), (0.5,)),
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "cifar100": ((0.507, 0.487, 0.441), (0.267, 0.256, 0.276)),
}
NORMALIZES = ("auto", *FIXED, "train-stats")


def pixel_stats(x: np.ndarray, chunk: int = 4096) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 pixels in [0, 1] units, in float64 chunks (no full float copy)."""
    total = np.zeros(x.shape[1])
    sq = np.zeros(x.shape[1])
    for i in range(0, len(x), chunk):
        part = x[i : i + chunk].astype(np.float64) / 255.0
        total += part.sum(axis=(0, 2, 3))
        sq += (part * part).sum(axis=(0, 2, 3))
    count = len(x) * x.shape[2] * x.shape[3]
    mean = total / count
    std = np.sqrt(np.maximum(sq / count - mean * mean, 0.0))
    return tuple(mean.tolist()), tuple(np.where(std > 0, std, 1.0).tolist())


def normalization(choice: str, ds: Dataset) -> Normalization | None:
    if not ds.is_image:
        if choice != "auto":
            raise ConfigError(
                f"run-config key 'normalize' = {choice!r} is not allowed for dataset {ds.name!r}: its features are not images; use 'auto'"
            )
        return None
    name = ds.default_normalize if choice == "auto" else choice
    assert name is not None
    channels = ds.in_shape[0]
    if name == "train-stats":
        mean, std = pixel_stats(ds.x_train)
    else:
        mean, std = FIXED[name]
        if len(mean) == 1:
            mean, std = mean * channels, std * channels
        elif len(mean) != channels:
            raise ConfigError(f"run-config key 'normalize' = {choice!r} is for 3-channel images; dataset {ds.name!r} has {channels}")
    return Normalization(name, mean, std)


def augmentation(choice: str, ds: Dataset, norm: Normalization | None, device: torch.device | str = "cpu") -> Augment | None:
    """The training augmentation, its fill values on ``device`` (where the minibatches are)."""
    from fedapp.data.augment import make_augment

    name = ds.default_augment if choice == "auto" else choice
    if name == "none":
        return None
    if norm is None:
        raise ConfigError(
            f"run-config key 'augment' = {choice!r} is not allowed for dataset {ds.name!r}: its features are not images; use 'auto'"
        )
    return make_augment(name, norm.of_black(device))
