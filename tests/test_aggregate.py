"""Masked weighted mean against hand-computed cases and against Flower's own FedAvg."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from fedapp.core.aggregate import Contribution, masked_mean


def test_hand_computed_masked_mean_with_unequal_weights_and_uncovered_entries() -> None:
    g = {"w": np.array([10.0, 20.0, 30.0, 40.0], np.float32)}
    a = Contribution(1.0, {"w": np.array([1.0, 2.0], np.float32)}, {"w": np.array([True, True, False, False])})
    b = Contribution(3.0, {"w": np.array([5.0, 7.0], np.float32)}, {"w": np.array([True, False, True, False])})
    out = masked_mean(g, [a, b])
    # entry 0: (1*1 + 3*5)/4 = 4; entry 1: only a -> 2; entry 2: only b -> 7; entry 3: nobody -> keeps 40
    np.testing.assert_allclose(out.arrays["w"], [4.0, 2.0, 7.0, 40.0])
    np.testing.assert_array_equal(out.counts["w"], [2, 1, 1, 0])
    assert out.coverage == pytest.approx(0.75)
    assert out.arrays["w"].dtype == np.float32


def test_server_learning_rate_moves_part_way_and_leaves_uncovered_entries() -> None:
    g = {"w": np.array([1.0, 1.0], np.float64)}
    c = Contribution(1.0, {"w": np.array([3.0])}, {"w": np.array([True, False])})
    out = masked_mean(g, [c], server_lr=0.25)
    # x_g - 0.25 * (x_g - x_avg) = 1 - 0.25 * (1 - 3) = 1.5; uncovered: unchanged
    np.testing.assert_allclose(out.arrays["w"], [1.5, 1.0])


def test_missing_tensor_counts_as_no_contribution_and_ints_are_kept() -> None:
    g: dict[str, np.ndarray] = {"w": np.zeros(2, np.float32), "b": np.ones(1, np.float32), "n": np.array(7, np.int64)}
    c1 = Contribution(2.0, {"w": np.array([2.0, 4.0], np.float32), "b": np.array([3.0], np.float32), "n": np.array(99)})
    c2 = Contribution(2.0, {"w": np.array([4.0, 8.0], np.float32)})  # sent no "b"
    out = masked_mean(g, [c1, c2])
    np.testing.assert_allclose(out.arrays["w"], [3.0, 6.0])
    np.testing.assert_allclose(out.arrays["b"], [3.0])
    assert int(out.arrays["n"]) == 7  # num_batches_tracked-like counters are never averaged


def test_all_ones_masks_equal_flower_fedavg_aggregation() -> None:
    rng = np.random.default_rng(0)
    shapes = {"a": (3, 4), "b": (5,), "c": (2, 3, 3, 3)}
    global_arrays = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    replies, contribs = [], []
    for n in (10, 30, 7):
        arrays = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        replies.append(RecordDict({"arrays": ArrayRecord([arrays[k] for k in shapes]), "metrics": MetricRecord({"num-examples": n})}))
        contribs.append(Contribution(float(n), arrays))
    flower = aggregate_arrayrecords(replies, "num-examples").to_numpy_ndarrays()
    ours = masked_mean(global_arrays, contribs).arrays
    for i, k in enumerate(shapes):
        np.testing.assert_allclose(ours[k], flower[i], rtol=1e-5, atol=1e-6)


def test_dense_fast_path_is_bit_identical_to_all_ones_masks() -> None:
    """Dense replies skip the masks; the result must equal the masked path exactly, alone and mixed with masked replies."""
    rng = np.random.default_rng(5)
    shapes = {"conv": (8, 3, 3, 3), "fc": (10, 40), "b": (10,)}
    g = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    values = [{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()} for _ in range(4)]
    weights = [0.37, 120.0, 7.0, 1e-3]
    values.append({k: v for k, v in values[1].items() if k != "b"})  # sent no "b"
    weights += [2.0, 0.0]
    values.append(values[2])  # zero weight: left out
    dense = [Contribution(w, v) for w, v in zip(weights, values, strict=True)]
    ones = [Contribution(w, v, {k: np.ones(shapes[k], bool) for k in v}) for w, v in zip(weights, values, strict=True)]
    coord = rng.random(shapes["fc"]) < 0.3
    masked = Contribution(3.0, {"fc": values[0]["fc"][coord]}, {"fc": coord})
    for server_lr in (1.0, 0.5):
        for fast, slow in ((dense, ones), ([*dense[:2], masked, *dense[2:]], [*ones[:2], masked, *ones[2:]])):
            a, b = masked_mean(g, fast, server_lr), masked_mean(g, slow, server_lr)
            for k in shapes:
                assert np.array_equal(a.arrays[k], b.arrays[k]) and a.arrays[k].dtype == np.float32
                assert np.array_equal(a.counts[k], b.counts[k])
            assert a.counts["b"].max() == 4  # four replies sent "b" with a weight > 0


def test_a_tensor_nobody_sent_keeps_its_value_and_counts_are_whole_numbers_shaped_like_it() -> None:
    w, b = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), np.array([5.0, 6.0], np.float32)
    g: dict[str, np.ndarray] = {"n": np.array(3, np.int64), "w": w, "b": b}
    c = Contribution(1.0, {"w": np.array([[3.0, 2.0], [1.0, 0.0]], np.float32)})  # dense "w"; nobody sends "b"
    for server_lr in (1.0, 0.5):
        out = masked_mean(g, [c], server_lr)
        assert int(out.arrays["n"]) == 3  # an int tensor listed first does not end the loop
        np.testing.assert_array_equal(out.arrays["b"], [5.0, 6.0])  # no contributor: unchanged (not 0/0)
        np.testing.assert_array_equal(out.counts["b"], [0, 0])
        assert out.counts["w"].shape == (2, 2) and out.counts["w"].dtype == np.int64 and out.counts["w"].tolist() == [[1, 1], [1, 1]]
    np.testing.assert_array_equal(out.arrays["w"], [[2.0, 2.0], [2.0, 2.0]])  # 1 + 0.5 * (avg - 1), ...: halfway
    assert out.coverage == pytest.approx(4 / 6)
    m = Contribution(1.0, {"w": np.array([9.0], np.float32)}, {"w": np.array([[False, False], [True, False]])})
    masked = masked_mean(g, [m])
    assert masked.counts["w"].dtype == np.int64 and masked.counts["w"].tolist() == [[0, 0], [1, 0]]
    np.testing.assert_array_equal(masked.arrays["w"], [[1.0, 2.0], [9.0, 4.0]])
    assert masked_mean({"n": g["n"]}, [c]).coverage == 0.0  # no float parameter at all


def test_dense_weights_summing_to_less_than_one_still_average() -> None:
    g = {"w": np.array([100.0, 100.0])}
    replies = [Contribution(0.25, {"w": np.array([4.0, 0.0])}), Contribution(0.5, {"w": np.array([1.0, 3.0])})]
    # (0.25 * 4 + 0.5 * 1) / 0.75 = 2; (0 + 0.5 * 3) / 0.75 = 2
    np.testing.assert_allclose(masked_mean(g, replies).arrays["w"], [2.0, 2.0])


def test_mask_of_is_none_for_unsent_all_ones_for_dense_and_flat_for_masked() -> None:
    c = Contribution(1.0, {"dense": np.zeros((2, 2)), "sel": np.zeros(1)}, {"sel": np.array([[False, True], [False, False]])})
    assert c.mask_of("absent", 4) is None
    dense = c.mask_of("dense", 4)
    assert dense is not None and dense.dtype == bool and dense.tolist() == [True] * 4
    assert (m := c.mask_of("sel", 4)) is not None and m.tolist() == [False, True, False, False]
