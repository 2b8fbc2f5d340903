"""scikit-learn's bundled 8x8 digits (1,797 images, no download): pixels / 16,
shaped (1, 8, 8); a seeded stratified hold-out of 497 images is the global test set.

Importing scikit-learn (with scipy) costs a process 1.5-2.5 s, paid in every simulation
worker. So the pixels are read from the CSV file scikit-learn bundles, the way
``load_digits`` reads it, without importing the package; and the stratified split
(``train_test_split(..., stratify=y, random_state=seed)``) is computed by scikit-learn
once per (scikit-learn version, seed) and kept as index arrays in the index cache
(fedapp.data.index_cache). Every later process reads 1,797 indices instead. The result is
the same arrays either way; a cache file that is not a valid split is computed again.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
from pathlib import Path

import numpy as np

from fedapp.data.index_cache import cached_indices

TEST_SIZE = 497
NUM_SAMPLES = 1797


def bundled_digits() -> tuple[np.ndarray, np.ndarray]:
    """``load_digits().images / 16`` as float32 (N, 1, 8, 8) and its targets, read from the
    package's data file without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")  # a top-level find_spec imports nothing
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("dataset 'digits' needs scikit-learn (pip install scikit-learn)")
    with gzip.open(Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz", "rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    x = (data[:, :-1].reshape(-1, 8, 8) / 16.0).astype(np.float32)[:, None, :, :]
    return x, data[:, -1].astype(np.int64)


def sklearn_split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    return tuple(train_test_split(np.arange(len(y)), test_size=TEST_SIZE, stratify=y, random_state=seed))  # type: ignore[return-value]


def valid_split(train: np.ndarray, test: np.ndarray) -> bool:
    both = np.concatenate([train, test])
    return len(test) == TEST_SIZE and len(both) == NUM_SAMPLES and np.array_equal(np.sort(both), np.arange(NUM_SAMPLES))


def cached_split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The stratified (train, test) indices for ``seed``, from the cache or computed and stored."""

    def compute() -> dict[str, np.ndarray]:
        train, test = sklearn_split(y, seed)
        return {"train": train, "test": test}

    name = f"digits-split-sklearn{importlib.metadata.version('scikit-learn')}-test{TEST_SIZE}-seed{seed}.npz"
    split = cached_indices(name, compute, lambda a: a.keys() == {"train", "test"} and valid_split(a["train"], a["test"]))
    return split["train"], split["test"]


def digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x, y = bundled_digits()
    train, test = cached_split(y, seed)
    return x[train], y[train], x[test], y[test]
