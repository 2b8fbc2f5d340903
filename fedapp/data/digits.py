"""scikit-learn's bundled 8x8 digits (1,797 images, no download): pixels / 16,
shaped (1, 8, 8); a seeded stratified hold-out of 497 images is the global test set."""

from __future__ import annotations

import numpy as np

TEST_SIZE = 497


def digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # imported here: scikit-learn (with scipy) takes ~1 s to import
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_SIZE, stratify=y, random_state=seed)
    return x_tr, y_tr, x_te, y_te
