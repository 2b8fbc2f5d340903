"""Shard partition (spec fedselect §4): class assignment, sizes, local test splits."""

from __future__ import annotations

import numpy as np
import pytest

from fedapp.core.config import ConfigError
from fedapp.data import check_partition, client_data, dataset_for
from fedapp.data.partition import shard_partition
from fedapp.methods.registry import resolve
from fedapp.sim.run_local import full_config


def classes(y: np.ndarray) -> set[int]:
    return set(np.unique(y).tolist())


def test_two_clients_one_class_each_take_whole_classes() -> None:
    y_train = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    y_test = np.array([1, 0, 1, 0])
    split = shard_partition(y_train, y_test, num_clients=2, classes_per_client=1, samples_per_client=0, seed=3)
    got = sorted((tuple(t.tolist()), tuple(s.tolist())) for t, s in zip(split.train, split.test, strict=True))
    assert got == [((0, 1, 2, 3), (1, 3)), ((4, 5, 6, 7), (0, 2))]
    assert all(r.size == 0 for r in split.rest)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_digits_ten_clients_two_classes_ten_samples(seed: int) -> None:
    raw = full_config({"partition": "shard", "num-clients": 10, "classes-per-client": 2, "samples-per-client": 10, "data-seed": seed})
    cfg = resolve(raw)[0]
    ds = dataset_for(cfg)
    split = shard_partition(ds.y_train, ds.y_test, 10, 2, 10, seed)
    all_train = np.concatenate(split.train + split.rest)
    assert np.array_equal(np.sort(all_train), np.arange(ds.y_train.size))  # every shard dealt exactly once
    assert np.array_equal(np.sort(np.concatenate(split.test)), np.arange(ds.y_test.size))
    per_class = {c: 0 for c in range(10)}
    for pid in range(10):
        data = client_data(cfg, pid)
        own = classes(data.y_train)
        assert len(data.y_train) == 10 and 1 <= len(own) <= 2
        assert classes(data.y_test) == own  # local test: the rest of the same shards
        assert not set(split.train[pid].tolist()) & set(split.rest[pid].tolist())
        for c in own:
            per_class[c] += int((data.y_train == c).sum())
        counts = np.bincount(data.y_train, minlength=10)
        assert sorted(counts[counts > 0].tolist()) in ([5, 5], [10])
    assert all(v == 10 for v in per_class.values())  # each class is dealt twice (2 shards x 5)


def test_test_set_source_gives_matching_shards_of_the_test_set() -> None:
    raw = full_config(
        {"partition": "shard", "num-clients": 10, "classes-per-client": 2, "samples-per-client": 10, "local-test-source": "test-set"}
    )
    cfg = resolve(raw)[0]
    sizes = []
    for pid in range(10):
        data = client_data(cfg, pid)
        assert classes(data.y_test) == classes(data.y_train)
        sizes.append(len(data.y_test))
    assert sum(sizes) == dataset_for(cfg).y_test.size


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"partition": "shard", "num-clients": 3, "classes-per-client": 3, "samples-per-client": 9}, "'classes-per-client'"),
        ({"partition": "shard", "num-clients": 10, "classes-per-client": 2, "samples-per-client": 7}, "'samples-per-client'"),
        ({"partition": "shard", "num-clients": 10, "classes-per-client": 2, "samples-per-client": 200}, "'samples-per-client'"),
        ({"partition": "dirichlet", "samples-per-client": 10}, "'samples-per-client'"),
        ({"partition": "iid", "local-test-source": "test-set"}, "'local-test-source'"),
    ],
)
def test_bad_shard_settings_name_the_key(override: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        check_partition(resolve(full_config(override))[0])
