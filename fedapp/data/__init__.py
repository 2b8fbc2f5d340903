"""Datasets by name, federated splits, and a per-process cache.

Everything here is deterministic in (dataset, data-seed, partition keys), so the
server and every client process compute the same split without talking. Loaded
arrays are cached per process, not per message: a Ray actor or the in-process
engine simulating many clients holds one copy of the data plus index arrays.
Image sets stay uint8; a client's slice is normalised to float32 when its job is
built (the copy is that client's share only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from fedapp.core.config import ConfigError, RunConfig
from fedapp.data import catalog, medmnist
from fedapp.data.dataset import ClientData, Dataset, Normalization
from fedapp.data.digits import digits
from fedapp.data.partition import ShardSplit, local_split, partition_indices, shard_partition
from fedapp.data.preprocess import augmentation, normalization
from fedapp.data.synthetic import synthetic

__all__ = ["LOADERS", "ClientData", "Dataset", "Normalization", "client_data", "dataset_for", "load_dataset", "register_dataset"]

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# (data-seed, data-root) -> float features as (x_train, y_train, x_test, y_test), or a Dataset (image sets: uint8 pixels)
Loader = Callable[[int, str], Arrays | Dataset]

LOADERS: dict[str, Loader] = {
    "synthetic-32k": lambda seed, root: synthetic(2000, seed),
    "synthetic-3.2k": lambda seed, root: synthetic(200, seed),
    "digits": lambda seed, root: digits(seed),
}


def register_dataset(name: str, loader: Loader) -> None:
    """Add a dataset loader (the real-data catalog registers its names this way)."""
    LOADERS[name] = loader


def _catalog_loader(name: str) -> Loader:
    return lambda seed, root: catalog.load(name, seed, root)


for _name in catalog.dataset_names():
    register_dataset(_name, _catalog_loader(_name))


@lru_cache(maxsize=4)
def load_dataset(name: str, data_seed: int, data_root: str = "") -> Dataset:
    """The stored arrays, read once per process (every client this process simulates shares them)."""
    if name not in LOADERS:
        med = set(medmnist.names())
        listed = ", ".join(n for n in LOADERS if n not in med)
        raise ConfigError(
            f"run-config key 'dataset' = {name!r} is not allowed: expected one of {listed}, "
            f"or a MedMNIST 2D set ({', '.join(medmnist.FLAGS)}; append -64, -128 or -224 for the larger images)"
        )
    out = LOADERS[name](data_seed, data_root)
    if isinstance(out, Dataset):
        return out
    x_tr, y_tr, x_te, y_te = out
    num_classes = int(max(y_tr.max(), y_te.max())) + 1
    return Dataset(name, x_tr, y_tr, x_te, y_te, num_classes)


@lru_cache(maxsize=4)
def _prepared(name: str, data_seed: int, data_root: str, normalize: str, input_noise: float = 0.0) -> Dataset:
    ds = load_dataset(name, data_seed, data_root)
    if input_noise > 0:
        if not np.issubdtype(ds.x_train.dtype, np.floating):
            raise ConfigError(
                f"run-config key 'input-noise' = {input_noise} needs a dataset stored as floats (digits, synthetic); {name!r} is not"
            )
        x_tr, x_te = add_noise(ds.x_train, ds.x_test, input_noise, data_seed)
        ds = dataclasses.replace(ds, x_train=x_tr, x_test=x_te)
    return dataclasses.replace(ds, norm=normalization(normalize, ds))  # shares the arrays


def dataset_for(cfg: RunConfig) -> Dataset:
    """The run's dataset with its normalisation chosen (``Dataset.features`` applies it)."""
    return _prepared(cfg.dataset, cfg.data_seed, cfg.data_root, cfg.normalize, cfg.input_noise)


def check_partition(cfg: RunConfig) -> None:
    """Build the split once so a key that cannot hold fails before the first round."""
    if cfg.partition != "shard" and (cfg.samples_per_client or cfg.local_test_source != "own-data"):
        bad = ("samples-per-client", cfg.samples_per_client) if cfg.samples_per_client else ("local-test-source", cfg.local_test_source)
        key, value = bad
        raise ConfigError(f"run-config key {key!r} = {value!r} is only supported with partition = 'shard' (got {cfg.partition!r})")
    client_indices(cfg)


def add_noise(x_tr: np.ndarray, x_te: np.ndarray, sigma: float, data_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Additive Gaussian noise, fixed per sample: drawn once from the data seed, so every
    process (server, each client) sees the same noisy images in every round."""
    rng = np.random.default_rng([data_seed, 0x6E6F6973])
    noisy = [(x + sigma * rng.standard_normal(x.shape)).astype(x.dtype) for x in (x_tr, x_te)]
    return noisy[0], noisy[1]


@lru_cache(maxsize=8)
def _partitions(
    name: str, data_seed: int, data_root: str, normalize: str, noise: float, kind: str, n: int, alpha: float, k: int, min_size: int
) -> tuple[np.ndarray, ...]:
    ds = _prepared(name, data_seed, data_root, normalize, noise)  # the run's own Dataset: never a second read
    return tuple(partition_indices(kind, ds.y_train, n, data_seed, alpha, k, min_size, groups=ds.groups))


@lru_cache(maxsize=8)
def _shards(name: str, data_seed: int, data_root: str, n: int, k: int, samples: int) -> ShardSplit:
    ds = load_dataset(name, data_seed, data_root)
    return shard_partition(ds.y_train, ds.y_test, n, k, samples, data_seed)


def shard_split(cfg: RunConfig) -> ShardSplit:
    return _shards(cfg.dataset, cfg.data_seed, cfg.data_root, cfg.num_clients, cfg.classes_per_client, cfg.samples_per_client)


def client_indices(cfg: RunConfig) -> tuple[np.ndarray, ...]:
    if cfg.partition == "shard":
        return shard_split(cfg).train
    return _partitions(
        cfg.dataset, cfg.data_seed, cfg.data_root, cfg.normalize, cfg.input_noise, cfg.partition, cfg.num_clients,
        cfg.dirichlet_alpha, cfg.classes_per_client, cfg.min_partition_size,
    )  # fmt: skip


def client_data(cfg: RunConfig, pid: int) -> ClientData:
    if not 0 <= pid < cfg.num_clients:
        raise ConfigError(f"partition-id {pid} is outside 0..{cfg.num_clients - 1} (run-config key 'num-clients' = {cfg.num_clients})")
    ds = dataset_for(cfg)
    aug = augmentation(cfg.augment, ds, ds.norm)
    if cfg.partition == "shard":
        split = shard_split(cfg)
        tr = split.train[pid]
        if cfg.local_test_source == "test-set":
            t = split.test[pid]
            return ClientData(ds.features(ds.x_train[tr]), ds.y_train[tr], ds.features(ds.x_test[t]), ds.y_test[t], aug)
        if split.rest[pid].size:  # digits setting (spec fedselect §7.1): the rest of the client's shards
            rest = split.rest[pid]
            return ClientData(ds.features(ds.x_train[tr]), ds.y_train[tr], ds.features(ds.x_train[rest]), ds.y_train[rest], aug)
    train, test = local_split(client_indices(cfg)[pid], cfg.local_test_fraction, cfg.data_seed * 100_003 + pid)
    return ClientData(ds.features(ds.x_train[train]), ds.y_train[train], ds.features(ds.x_train[test]), ds.y_train[test], aug)
