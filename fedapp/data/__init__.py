"""Datasets by name, federated splits, and a per-process cache.

Everything here is deterministic in (dataset, data-seed, partition keys), so the
server and every client process compute the same split without talking. Loaded
arrays are cached per process, not per message: a Ray actor or the in-process
engine simulating many clients holds one copy of the data plus index arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fedapp.config import ConfigError, RunConfig
from fedapp.data.digits import digits
from fedapp.data.partition import local_split, partition_indices
from fedapp.data.synthetic import synthetic


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def in_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


@dataclass(frozen=True)
class ClientData:
    """One client's local train split and local test split (may be empty)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


Loader = Callable[[int, str], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]

LOADERS: dict[str, Loader] = {
    "synthetic-32k": lambda seed, root: synthetic(2000, seed),
    "synthetic-3.2k": lambda seed, root: synthetic(200, seed),
    "digits": lambda seed, root: digits(seed),
}


def register_dataset(name: str, loader: Loader) -> None:
    """Add a dataset loader (used by the real-data module)."""
    LOADERS[name] = loader


@lru_cache(maxsize=4)
def load_dataset(name: str, data_seed: int, data_root: str = "", input_noise: float = 0.0) -> Dataset:
    if name not in LOADERS:
        raise ConfigError(f"run-config key 'dataset' = {name!r} is not allowed: expected one of {', '.join(sorted(LOADERS))}")
    x_tr, y_tr, x_te, y_te = LOADERS[name](data_seed, data_root)
    if input_noise > 0:
        x_tr, x_te = add_noise(x_tr, x_te, input_noise, data_seed)
    num_classes = int(max(y_tr.max(), y_te.max())) + 1
    return Dataset(name, x_tr, y_tr, x_te, y_te, num_classes)


def add_noise(x_tr: np.ndarray, x_te: np.ndarray, sigma: float, data_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Additive Gaussian noise, fixed per sample: drawn once from the data seed, so every
    process (server, each client) sees the same noisy images in every round."""
    rng = np.random.default_rng([data_seed, 0x6E6F6973])
    noisy = [(x + sigma * rng.standard_normal(x.shape)).astype(x.dtype) for x in (x_tr, x_te)]
    return noisy[0], noisy[1]


def dataset_for(cfg: RunConfig) -> Dataset:
    return load_dataset(cfg.dataset, cfg.data_seed, cfg.data_root, cfg.input_noise)


@lru_cache(maxsize=8)
def _partitions(
    name: str, data_seed: int, data_root: str, kind: str, n: int, alpha: float, k: int, min_size: int
) -> tuple[np.ndarray, ...]:
    ds = load_dataset(name, data_seed, data_root)
    return tuple(partition_indices(kind, ds.y_train, n, data_seed, alpha, k, min_size))


def client_indices(cfg: RunConfig) -> tuple[np.ndarray, ...]:
    return _partitions(
        cfg.dataset, cfg.data_seed, cfg.data_root, cfg.partition, cfg.num_clients,
        cfg.dirichlet_alpha, cfg.classes_per_client, cfg.min_partition_size,
    )  # fmt: skip


def client_data(cfg: RunConfig, pid: int) -> ClientData:
    if not 0 <= pid < cfg.num_clients:
        raise ConfigError(f"partition-id {pid} is outside 0..{cfg.num_clients - 1} (run-config key 'num-clients' = {cfg.num_clients})")
    ds = dataset_for(cfg)
    train, test = local_split(client_indices(cfg)[pid], cfg.local_test_fraction, cfg.data_seed * 100_003 + pid)
    return ClientData(ds.x_train[train], ds.y_train[train], ds.x_train[test], ds.y_train[test])
