"""The in-memory dataset and one client's slice of it.

Image datasets keep their pixels as uint8 (N, C, H, W), exactly as read from disk:
CIFAR-10 is 154 MB that way and 614 MB as float32, so one process simulating many
clients holds one uint8 copy and converts only the slice a client trains on (and the
test batch being evaluated) to normalised float32. Feature datasets (synthetic,
digits) are float32 already and have no image preprocessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where a tensor is made, so `fedapp data` and the CLI start without it
    import torch

    from fedapp.core.train import Augment


@dataclass(frozen=True)
class Normalization:
    """Per-channel ``(x / 255 - mean) / std`` for uint8 pixels (mean, std in [0, 1] units)."""

    name: str
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = x.astype(np.float32)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        mean, std = np.asarray(self.mean, np.float32).reshape(shape), np.asarray(self.std, np.float32).reshape(shape)
        out /= np.float32(255.0)
        out -= mean
        out /= std
        return out

    def tensor(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`__call__` in torch on ``x``'s device (the same float32 operations, the same bits)."""
        import torch

        shape = (1, -1) + (1,) * (x.dim() - 2)
        mean = torch.tensor(self.mean, dtype=torch.float32, device=x.device).reshape(shape)
        std = torch.tensor(self.std, dtype=torch.float32, device=x.device).reshape(shape)
        return (x.to(torch.float32) / 255.0 - mean) / std

    def of_black(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The normalised value of a black pixel per channel (torchvision's fill=0 before Normalize)."""
        import torch

        return torch.tensor([-m / s for m, s in zip(self.mean, self.std, strict=True)], dtype=torch.float32, device=device)


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray  # float32 features, or uint8 (N, C, H, W) pixels for image sets
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    groups: np.ndarray | None = None  # per-training-sample source id (mixed-source sets), for partition = "source"
    default_normalize: str | None = None  # image sets: the normalisation "auto" means; None: features, no preprocessing
    default_augment: str = "none"  # the augmentation "auto" means
    norm: Normalization | None = None  # the normalisation this run uses (set by dataset_for)

    @property
    def in_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def is_image(self) -> bool:
        return self.default_normalize is not None

    def features(self, x: np.ndarray) -> np.ndarray:
        """Model inputs (float32) for stored samples ``x``."""
        return self.norm(x) if self.norm is not None else x


@dataclass(frozen=True)
class ClientData:
    """One client's local train split and local test split (may be empty), as float32 model inputs."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    augment: Augment | None = None  # applied to each training minibatch (seeded by the job's generator)
