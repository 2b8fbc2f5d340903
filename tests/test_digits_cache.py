"""The digits loader reads scikit-learn's bundled file without importing scikit-learn and
keeps the seeded stratified split in a cache: the arrays equal ``load_digits`` +
``train_test_split`` exactly, from a fresh cache and from a filled one, and a damaged cache
file is computed again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedapp.data.digits import digits

ROOT = Path(__file__).resolve().parents[1]


def reference(seed: int) -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=497, stratify=y, random_state=seed)
    return x_tr, y_tr, x_te, y_te


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_fresh_and_cached_splits_equal_scikit_learns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setenv("FEDAPP_CACHE_DIR", str(tmp_path))
    want = reference(seed)
    for _ in ("computed", "from the cache"):
        got = digits(seed)
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    assert len(list(tmp_path.glob("digits-split-*.npz"))) == 1


def test_a_damaged_cache_file_is_computed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDAPP_CACHE_DIR", str(tmp_path))
    digits(3)
    (path,) = tmp_path.glob("digits-split-*.npz")
    np.savez(path, train=np.arange(1300), test=np.arange(497))  # overlapping: not a split
    assert all(np.array_equal(a, b) for a, b in zip(digits(3), reference(3), strict=True))
    path.write_bytes(b"not an npz")
    assert all(np.array_equal(a, b) for a, b in zip(digits(3), reference(3), strict=True))


def test_a_process_with_the_cache_filled_does_not_import_scikit_learn(tmp_path: Path) -> None:
    code = "import sys; from fedapp.data.digits import digits; digits(5); print('sklearn' in sys.modules)"
    env = {"FEDAPP_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    first, second = (
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True) for _ in range(2)
    )
    assert first.stdout.split() == ["True"] and second.stdout.split() == ["False"]
