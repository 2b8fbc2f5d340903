"""Synthetic generator constants, digits, and partitioners."""

from __future__ import annotations

import numpy as np
import pytest

from fedapp.core.config import ConfigError, RunConfig
from fedapp.data import client_data, load_dataset
from fedapp.data.partition import local_split, partition_indices
from fedapp.data.synthetic import clusters, sample


def test_synthetic_clusters_match_the_spec_table() -> None:
    centres = {label: sorted(tuple(c) for c, _, lab in clusters() if lab == label) for label in range(4)}
    assert centres[0] == sorted([(-4, 4), (-2, 2), (4, 4), (6, 2)])
    assert centres[1] == sorted([(-3, 3), (-1, 1), (5, 3), (7, 1)])
    assert centres[2] == sorted([(-4, -4), (-2, -6), (4, -4), (6, -6)])
    assert centres[3] == sorted([(-3, -5), (-1, -7), (5, -5), (7, -7)])


def test_synthetic_cluster_covariances_are_a_transpose_a() -> None:
    xy, _ = sample(20_000, np.random.default_rng(0))
    per = {tuple(c): a for c, a, _ in clusters()}
    blocks = xy.reshape(16, 20_000, 2)
    for (centre, a), block in zip(per.items(), blocks, strict=True):
        np.testing.assert_allclose(block.mean(0), centre, atol=0.02)
        np.testing.assert_allclose(np.cov(block.T), a.T @ a, atol=0.01)


def test_synthetic_sizes_and_train_statistics_normalisation() -> None:
    ds = load_dataset("synthetic-32k", 0)
    assert ds.x_train.shape == (32_000, 5) and ds.x_test.shape == (6_400, 5) and ds.num_classes == 4
    np.testing.assert_allclose(ds.x_train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(ds.x_train.std(0), 1, atol=1e-4)
    assert np.bincount(ds.y_train).tolist() == [8000] * 4
    assert load_dataset("synthetic-3.2k", 0).x_train.shape == (3_200, 5)


def test_explicit_groups_give_each_client_exactly_its_classes() -> None:
    labels = np.repeat(np.arange(4), 10)
    parts = partition_indices("0,1|2,3", labels, 2, seed=0)
    assert set(labels[parts[0]]) == {0, 1} and set(labels[parts[1]]) == {2, 3}
    shared = partition_indices("0,1|1,2", labels, 2, seed=0)
    assert len(np.intersect1d(shared[0], shared[1])) == 0
    assert np.sum(labels[shared[0]] == 1) == 5 and np.sum(labels[shared[1]] == 1) == 5
    with pytest.raises(ConfigError, match="names 2 client groups but 'num-clients' = 3"):
        partition_indices("0,1|2,3", labels, 3, seed=0)
    (central,) = partition_indices("0,1,2,3", labels, 1, seed=0)  # one group: a centralised reference
    assert sorted(central.tolist()) == list(range(40))


@pytest.mark.parametrize("kind", ["iid", "dirichlet", "pathological"])
def test_flower_partitioners_give_disjoint_cover(kind: str) -> None:
    labels = load_dataset("digits", 0).y_train
    parts = partition_indices(kind, labels, 10, seed=0, alpha=0.3, classes_per_client=2, min_partition_size=10)
    allidx = np.concatenate(parts)
    assert len(allidx) == len(set(allidx.tolist()))
    if kind in ("iid", "dirichlet"):
        assert sorted(allidx.tolist()) == list(range(labels.size))
    if kind == "dirichlet":
        assert min(len(p) for p in parts) >= 10
    if kind == "pathological":
        assert all(len(set(labels[p].tolist())) <= 2 for p in parts)


def test_local_split_is_seeded_and_disjoint() -> None:
    idx = np.arange(100)
    tr, te = local_split(idx, 0.3, seed=4)
    assert len(te) == 30 and len(tr) == 70 and not set(tr) & set(te)
    assert np.array_equal(te, local_split(idx, 0.3, seed=4)[1])


def test_client_data_rejects_partition_outside_range() -> None:
    with pytest.raises(ConfigError, match="partition-id 5"):
        client_data(RunConfig(dataset="digits", num_clients=2, partition="iid"), 5)
