"""Split a training set's indices over clients.

iid, dirichlet and pathological use Flower Datasets' partitioners on an in-memory
label column (offline); their result is kept in the index cache (fedapp.data.index_cache),
keyed by the labels, the split's keys and the versions that compute it, so that a
simulation worker reads it instead of importing Hugging Face ``datasets``. Explicit class
groups ("0,1|2,3") are ours: Flower Datasets has no partitioner that takes a fixed class
list per client. A class named in several groups is split evenly between those clients.
"source" gives client i the samples of source i of a mixed-source dataset (the dataset's
per-sample ``groups``). "shard" (FedSelect's pathological shards) also assigns each client
matching shards of the test set, so it has its own function returning train, rest-of-shard
and test indices.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from dataclasses import dataclass

import numpy as np

from fedapp.core.config import PARTITION_RE, ConfigError
from fedapp.data.index_cache import cached_indices

FLOWER_KINDS = ("iid", "dirichlet", "pathological")


def explicit_groups(spec: str, labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    groups = [[int(c) for c in g.split(",")] for g in spec.replace(" ", "").split("|")]
    if len(groups) != num_clients:
        raise ConfigError(f"run-config key 'partition' = {spec!r} names {len(groups)} client groups but 'num-clients' = {num_clients}")
    classes = set(np.unique(labels).tolist())
    for g in groups:
        for c in g:
            if c not in classes:
                raise ConfigError(f"run-config key 'partition' = {spec!r}: class {c} is not in this dataset (classes {sorted(classes)})")
    rng = np.random.default_rng(seed)
    owners: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        for c in g:
            owners.setdefault(c, []).append(i)
    parts: list[list[np.ndarray]] = [[] for _ in groups]
    for c, who in sorted(owners.items()):
        idx = rng.permutation(np.flatnonzero(labels == c))
        for i, chunk in zip(who, np.array_split(idx, len(who)), strict=True):
            parts[i].append(chunk)
    return [np.sort(np.concatenate(p)) for p in parts]


def _flower_partition(partitioner: object, labels: np.ndarray, order: np.ndarray, num_clients: int) -> list[np.ndarray]:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"label": labels[order], "idx": order})
    partitioner.dataset = ds  # type: ignore[attr-defined]
    return [np.sort(np.asarray(partitioner.load_partition(i)["idx"][:], dtype=np.int64)) for i in range(num_clients)]  # type: ignore[attr-defined]


def partition_indices(
    kind: str,
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    alpha: float = 0.5,
    classes_per_client: int = 2,
    min_partition_size: int = 10,
    groups: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Indices into ``labels`` for each client (disjoint). ``groups`` (per-sample source ids)
    is what partition = "source" splits by."""
    if kind == "source":
        return by_source(groups, num_clients)
    if num_clients > labels.size:
        raise ConfigError(f"run-config key 'num-clients' = {num_clients} exceeds the {labels.size} training samples")
    if kind == "dirichlet" and min_partition_size * num_clients > labels.size:
        raise ConfigError(
            f"run-config key 'min-partition-size' = {min_partition_size} cannot hold for {num_clients} clients over {labels.size} samples"
        )
    if kind == "pathological":
        n_classes = np.unique(labels).size
        if classes_per_client > n_classes:
            raise ConfigError(f"run-config key 'classes-per-client' = {classes_per_client} exceeds the {n_classes} classes")
    if kind in FLOWER_KINDS:
        keys = (kind, num_clients, seed, alpha, classes_per_client, min_partition_size)
        return cached_flower_partition(keys, labels)
    if PARTITION_RE.match(kind):
        return explicit_groups(kind, labels, num_clients, seed)
    raise ConfigError(f"run-config key 'partition' = {kind!r} is not supported for this dataset")


def cached_flower_partition(keys: tuple[str, int, int, float, int, int], labels: np.ndarray) -> list[np.ndarray]:
    """``flower_partition``'s result from the index cache, or computed and stored."""
    kind, num_clients, seed = keys[:3]
    digest = hashlib.sha256(repr((keys, labels.dtype.str, labels.shape)).encode())
    digest.update(np.ascontiguousarray(labels).tobytes())
    for package in ("flwr-datasets", "numpy"):  # the partitioners' code and their random draws
        digest.update(f"{package}={importlib.metadata.version(package)}".encode())
    names = [f"client{i}" for i in range(num_clients)]

    def valid(arrays: dict[str, np.ndarray]) -> bool:
        if list(arrays) != names:
            return False
        both = np.concatenate(list(arrays.values()))
        return bool(both.size == 0 or (both.min() >= 0 and both.max() < labels.size and np.unique(both).size == both.size))

    def compute() -> dict[str, np.ndarray]:
        return dict(zip(names, flower_partition(keys, labels), strict=True))

    name = f"partition-{kind}-n{num_clients}-seed{seed}-{digest.hexdigest()[:24]}.npz"
    return list(cached_indices(name, compute, valid).values())


def flower_partition(keys: tuple[str, int, int, float, int, int], labels: np.ndarray) -> list[np.ndarray]:
    """Flower Datasets' iid, dirichlet or pathological partitioner over ``labels``."""
    from fedapp.data.flower_datasets import partitioner_module

    fds = partitioner_module()
    kind, num_clients, seed, alpha, classes_per_client, min_partition_size = keys
    if kind == "iid":
        order = np.random.default_rng(seed).permutation(labels.size)
        return _flower_partition(fds.IidPartitioner(num_clients), labels, order, num_clients)
    ordered = np.arange(labels.size)
    if kind == "dirichlet":
        p = fds.DirichletPartitioner(num_clients, "label", alpha, min_partition_size=min_partition_size, seed=seed)
        return _flower_partition(p, labels, ordered, num_clients)
    p = fds.PathologicalPartitioner(num_clients, "label", classes_per_client, class_assignment_mode="random", seed=seed)
    return _flower_partition(p, labels, ordered, num_clients)


def by_source(groups: np.ndarray | None, num_clients: int) -> list[np.ndarray]:
    """Client i gets every sample of source i (mixed-source datasets such as cifar-mnist)."""
    if groups is None:
        raise ConfigError(
            "run-config key 'partition' = 'source' needs a mixed-source dataset (cifar-mnist, path-oct-tissue); this one has one source"
        )
    sources = int(groups.max()) + 1
    if num_clients != sources:
        raise ConfigError(
            f"run-config key 'num-clients' = {num_clients}: partition = 'source' gives each of the {sources} sources one client"
        )
    return [np.flatnonzero(groups == g) for g in range(sources)]


def local_split(indices: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of one client's indices into local train and local test."""
    if test_fraction <= 0:
        return indices, indices[:0]
    perm = np.random.default_rng(seed).permutation(indices)
    n_test = round(test_fraction * perm.size)
    n_test = min(max(n_test, 1), perm.size - 1) if perm.size > 1 else 0
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


@dataclass(frozen=True)
class ShardSplit:
    """Per client: training indices, the rest of its training shards, and the matching
    shards of the held-out test set (indices into the test set)."""

    train: tuple[np.ndarray, ...]
    rest: tuple[np.ndarray, ...]
    test: tuple[np.ndarray, ...]


def shard_partition(
    y_train: np.ndarray, y_test: np.ndarray, num_clients: int, classes_per_client: int, samples_per_client: int, seed: int
) -> ShardSplit:
    """Pathological shards as in FedSelect's code (../shared/specs/fedselect.md §4).

    Each class is cut into ``s*N/C`` equal shards; the shuffled list of shard slots is
    dealt out ``s`` per client (a client may draw one class twice); each client takes a
    random remaining shard of each of its classes and keeps the first ``n/s`` samples
    of it (all when ``samples_per_client`` is 0). The test set is cut the same way and
    each client gets the test shards with the same (class, shard) numbers.
    """
    classes = np.unique(y_train)
    slots = num_clients * classes_per_client
    if slots % classes.size:
        raise ConfigError(
            f"run-config key 'classes-per-client' = {classes_per_client}: shard partition needs num-clients x classes-per-client "
            f"({slots}) to be a multiple of the {classes.size} classes"
        )
    if samples_per_client % classes_per_client:
        raise ConfigError(
            f"run-config key 'samples-per-client' = {samples_per_client} is not allowed: expected a multiple of "
            f"classes-per-client ({classes_per_client})"
        )
    per_class = slots // classes.size
    rng = np.random.default_rng(seed)

    def cut(labels: np.ndarray) -> dict[int, list[np.ndarray]]:
        return {int(c): np.array_split(rng.permutation(np.flatnonzero(labels == c)), per_class) for c in classes}

    train_shards, test_shards = cut(y_train), cut(y_test)
    deal = rng.permutation(np.tile(classes, per_class)).reshape(num_clients, classes_per_client)
    left = {int(c): list(range(per_class)) for c in classes}
    keep = samples_per_client // classes_per_client
    train, rest, test = [], [], []
    for row in deal:
        picks = [(int(c), left[int(c)].pop(int(rng.integers(len(left[int(c)]))))) for c in row]
        shards = [train_shards[c][j] for c, j in picks]
        if keep and min(s.size for s in shards) < keep:
            raise ConfigError(
                f"run-config key 'samples-per-client' = {samples_per_client} is not allowed: a shard holds only "
                f"{min(s.size for s in shards)} samples, fewer than the {keep} taken from each"
            )
        cut_at = keep or max(s.size for s in shards)
        train.append(np.sort(np.concatenate([s[:cut_at] for s in shards])))
        rest.append(np.sort(np.concatenate([s[cut_at:] for s in shards])))
        test.append(np.sort(np.concatenate([test_shards[c][j] for c, j in picks])))
    return ShardSplit(tuple(train), tuple(rest), tuple(test))
