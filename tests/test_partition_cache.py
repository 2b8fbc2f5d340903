"""Flower Datasets' splits are kept in the index cache: the arrays equal the partitioner's own
result, from a fresh cache and from a filled one; a damaged file or one for other labels is
computed again; and a process that finds its split there never imports Hugging Face
``datasets`` (what every simulation worker would pay ~0.8 s of CPU for)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedapp.data.partition import flower_partition, partition_indices

ROOT = Path(__file__).resolve().parents[1]
LABELS = np.random.default_rng(5).integers(0, 10, 900)


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("kind", ["iid", "dirichlet", "pathological"])
def test_fresh_and_cached_splits_equal_the_partitioners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setenv("FEDAPP_CACHE_DIR", str(tmp_path))
    want = flower_partition((kind, 7, 3, 0.3, 2, 10), LABELS)
    for _ in ("computed", "from the cache"):
        assert same(partition_indices(kind, LABELS, 7, 3, alpha=0.3, classes_per_client=2, min_partition_size=10), want)
    assert len(list(tmp_path.glob(f"partition-{kind}-n7-seed3-*.npz"))) == 1


def test_every_key_and_the_labels_name_their_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDAPP_CACHE_DIR", str(tmp_path))
    keys = [("dirichlet", 6, 0, 0.5, 2, 10), ("dirichlet", 5, 0, 0.5, 2, 10), ("dirichlet", 6, 1, 0.5, 2, 10),
            ("dirichlet", 6, 0, 0.4, 2, 10), ("dirichlet", 6, 0, 0.5, 2, 12)]  # fmt: skip
    variants = [(k, LABELS) for k in keys] + [(keys[0], LABELS[::-1].copy())]
    for (kind, n, seed, alpha, k, min_size), labels in variants:
        got = partition_indices(kind, labels, n, seed, alpha=alpha, classes_per_client=k, min_partition_size=min_size)
        assert same(got, flower_partition((kind, n, seed, alpha, k, min_size), labels))
    assert len(list(tmp_path.glob("partition-*.npz"))) == len(variants)


def test_a_damaged_cache_file_is_computed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDAPP_CACHE_DIR", str(tmp_path))
    want = partition_indices("dirichlet", LABELS, 4, 2, alpha=0.3)
    (path,) = tmp_path.glob("partition-*.npz")
    damaged = {
        "overlapping": {f"client{i}": np.arange(10) for i in range(4)},
        "out of range": {f"client{i}": np.arange(i * 300, i * 300 + 5) for i in range(4)},
        "too few clients": {f"client{i}": np.arange(i * 5, i * 5 + 5) for i in range(3)},
        "floats": {f"client{i}": np.arange(i * 5, i * 5 + 5, dtype=np.float64) for i in range(4)},
    }
    for arrays in damaged.values():
        np.savez(path, **arrays)  # type: ignore[arg-type]
        assert same(partition_indices("dirichlet", LABELS, 4, 2, alpha=0.3), want)
    path.write_bytes(b"not an npz")
    assert same(partition_indices("dirichlet", LABELS, 4, 2, alpha=0.3), want)


def test_a_process_with_the_cache_filled_does_not_import_datasets(tmp_path: Path) -> None:
    code = (
        "import sys, numpy as np; from fedapp.data.partition import partition_indices; "
        "parts = partition_indices('dirichlet', np.random.default_rng(5).integers(0, 10, 900), 5, 0, alpha=0.3); "
        "print('datasets' in sys.modules, sum(p.size for p in parts))"
    )
    env = {"FEDAPP_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    first, second = (
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True) for _ in range(2)
    )
    assert first.stdout.split() == ["True", "900"] and second.stdout.split() == ["False", "900"]


def test_explicit_groups_never_import_flower_datasets() -> None:
    code = (
        "import sys, numpy as np; from fedapp.data.partition import partition_indices; "
        "partition_indices('0,1|2,3', np.arange(40) % 4, 2, 0); print('flwr_datasets' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
