"""The FedPeWS synthetic data (../shared/specs/fedpews.md §4.1).

4 classes x 4 two-dimensional Gaussian clusters, lifted to 5-D as [x, y, x^2, y^2, xy]
and z-scored with the *training* statistics. Generation is seeded (spec D10).
"""

from __future__ import annotations

import numpy as np

PRIMARY = np.array([(-4.0, 4.0), (4.0, 4.0), (-4.0, -4.0), (4.0, -4.0)])
SHAPES = [
    np.diag([0.05, 0.45]),  # P0
    np.array([[0.25, 0.15], [0.15, 0.25]]),  # P1
    np.array([[0.25, 0.15], [0.15, 0.25]]),  # P2
    np.diag([0.25, 0.05]),  # P3
]
TEST_PER_CLUSTER = 400


def clusters() -> list[tuple[np.ndarray, np.ndarray, int]]:
    """(centre, A, label) for the 16 clusters, in a fixed order."""
    out = []
    for p, (centre, a) in enumerate(zip(PRIMARY, SHAPES, strict=True)):
        for j in range(4):
            label = (0 if j % 2 == 0 else 1) + (0 if p < 2 else 2)
            out.append((centre + np.array([j, -j], float), a, label))
    return out


def sample(per_cluster: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for centre, a, label in clusters():
        z = rng.standard_normal((per_cluster, 2))
        xs.append(z @ a + centre)
        ys.append(np.full(per_cluster, label, np.int64))
    return np.concatenate(xs), np.concatenate(ys)


def lift(xy: np.ndarray) -> np.ndarray:
    x, y = xy[:, 0], xy[:, 1]
    return np.stack([x, y, x * x, y * y, x * y], axis=1)


def synthetic(per_cluster: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Train and test sets: (x_train, y_train, x_test, y_test), features float32 in 5-D."""
    rng = np.random.default_rng(seed)
    tr_xy, y_tr = sample(per_cluster, rng)
    te_xy, y_te = sample(TEST_PER_CLUSTER, rng)
    x_tr, x_te = lift(tr_xy), lift(te_xy)
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
    return ((x_tr - mean) / std).astype(np.float32), y_tr, ((x_te - mean) / std).astype(np.float32), y_te
