"""Robust aggregation and anomaly scores at their edges: zero updates, a zero median, weight-0
replies, float32 overflow, ties among many contributors, several and 2-D tensors. Each expected
value is computed by hand or by plain float64 formulas written out here, independent of
fedapp/server/robust.py."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from fedapp.core.aggregate import Contribution
from fedapp.server.robust import aggregate, anomaly, bound_norms, coordinate_wise, dot, trimmed_table


def dense(weight: float, **tensors: list[float]) -> Contribution:
    return Contribution(weight, {k: np.array(v, np.float32) for k, v in tensors.items()})


def f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


def test_unknown_rule_is_named_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"^unknown aggregation 'krum'; expected one of mean, trimmed-mean, median, norm-bound$"):
        aggregate("krum", {"w": f32(0)}, [dense(1, w=[1])])


def test_norm_bound_factor_defaults_to_two() -> None:
    g = {"w": f32(0)}
    replies = [dense(1, w=[1]), dense(1, w=[1]), dense(1, w=[10])]  # median norm 1: bound 2 -> clip 2/10
    _, scores = aggregate("norm-bound", g, replies)
    assert scores[2]["clip"] == 0.2 and "clip" not in scores[0]


def test_norm_bound_clip_is_rounded_to_four_decimals_and_works_below_unit_norms() -> None:
    g = {"w": f32(0, 0)}
    thirds = [dense(1, w=[1, 0]), dense(1, w=[0, 1]), dense(1, w=[3, 0])]  # bound 1 x median 1: clip 1/3
    _, scores = aggregate("norm-bound", g, thirds, norm_factor=1.0)
    assert scores[2]["clip"] == 0.3333
    small = [dense(1, w=[0.125, 0]), dense(1, w=[0, 0.125]), dense(1, w=[0.5, 0])]  # norms < 1: bound 0.25
    _, scores = aggregate("norm-bound", g, small)
    assert scores[2]["clip"] == 0.5


def test_bound_norms_leaves_weight_zero_and_at_bound_replies_as_they_are() -> None:
    g = {"w": f32(0, 0)}
    at_bound = [dense(2, w=[3, 4]), dense(3, w=[0, 5])]  # both norm 5 = 1.0 x median 5: not clipped
    out = bound_norms(g, at_bound, 1.0)
    assert out[0] is at_bound[0] and out[1] is at_bound[1]
    ignored = [dense(0, w=[300, 400]), dense(1, w=[1, 0]), dense(1, w=[0, 1])]  # weight 0: never counted or bounded
    assert bound_norms(g, ignored, 2.0)[0] is ignored[0]
    nobody = [dense(0, w=[3, 4])]
    assert bound_norms(g, nobody, 2.0) == nobody


def test_bound_norms_clips_weight_one_replies_and_keeps_shape_and_dtype() -> None:
    g = {"m": np.zeros((2, 2), np.float32)}
    replies = [Contribution(1, {"m": np.full((2, 2), v, np.float32)}) for v in (1.0, 1.0, 4.0)]  # norms 2, 2, 8
    out = bound_norms(g, replies, 2.0)  # bound 4: the third scaled by 1/2
    assert out[2] is not replies[2]
    np.testing.assert_array_equal(out[2].values["m"], np.full((2, 2), 2.0, np.float32))
    assert out[2].values["m"].dtype == np.float32 and out[2].values["m"].shape == (2, 2)


def test_dot_is_taken_in_the_arrays_dtype_and_redone_in_float64_on_overflow() -> None:
    a = np.full(3, 1 + 2**-12, np.float32)  # each square 1 + 2^-11 + 2^-24: float32 drops the 2^-24
    assert dot(a, a) == 3 * (1 + 2**-11)  # the fast float32 sum, not float64's 3.0014650...
    big = f32(1e20, 1e20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning leaks out
        assert dot(big, big) == pytest.approx(2e40, rel=1e-6)  # float32 overflows; float64 does not


def test_scores_survive_float32_overflow_without_warnings() -> None:
    g = {"w": f32(0, 0)}
    replies = [dense(1, w=[1e20, 0]), dense(1, w=[0, 1e20])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, scores = aggregate("mean", g, replies)
    # both norms 1e20 (median 1e20); mean step (5e19, 5e19): cosine 5e39 / (1e20 x 7.07e19) = 1/sqrt(2)
    assert [s["norm_ratio"] for s in scores] == [1.0, 1.0]
    assert [s["cosine"] for s in scores] == [round(1 / math.sqrt(2), 4)] * 2


def test_a_non_finite_aggregate_gives_null_cosines_without_warnings() -> None:
    g = {"w": f32(-3e38, 0)}
    reply = Contribution(1, {"w": f32(0, 1)})  # update (3e38, 1): finite in float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        overflowing = anomaly(g, [reply], {"w": f32(3e38, 1)})  # step 3e38 - (-3e38) overflows
        invalid = anomaly({"w": f32(0, 0)}, [Contribution(1, {"w": f32(0, 1)})], {"w": f32(np.inf, 1)})  # 0 x inf
    assert overflowing == [{"norm_ratio": 1.0, "cosine": None}]
    assert invalid == [{"norm_ratio": 1.0, "cosine": None}]


def test_cosine_and_norm_ratio_sum_over_every_tensor_and_measure_from_the_global_values() -> None:
    g = {"u": f32(1, 1), "v": f32(2)}
    a, b = dense(1, u=[2, 3], v=[5]), dense(1, u=[0, 1], v=[2])
    _, scores = aggregate("mean", g, [a, b])
    # mean u (1, 2), v 3.5: step (0, 1, 1.5); updates a (1, 2, 3), b (-1, 0, 0)
    step, da, db = np.array([0, 1, 1.5]), np.array([1.0, 2, 3]), np.array([-1.0, 0, 0])
    median = float(np.median([np.linalg.norm(da), np.linalg.norm(db)]))
    cosine = da @ step / (np.linalg.norm(da) * np.linalg.norm(step))
    assert scores[0] == {"norm_ratio": round(np.linalg.norm(da) / median, 4), "cosine": round(cosine, 4)}
    assert scores[1] == {"norm_ratio": round(np.linalg.norm(db) / median, 4), "cosine": 0.0}


def test_zero_updates_and_a_zero_median() -> None:
    g = {"w": f32(1, 1)}
    replies = [dense(1, w=[1, 1]), dense(1, w=[1, 1]), dense(1, w=[4, 5])]  # norms 0, 0, 5: median 0
    _, scores = aggregate("mean", g, replies)
    # step (1, 4/3) is parallel to the third update (3, 4): cosine 1; a zero update has cosine 0 and
    # ratio 1 (as large as the median); a non-zero one over a zero median has no ratio
    assert scores == [{"norm_ratio": 1.0, "cosine": 0.0}, {"norm_ratio": 1.0, "cosine": 0.0}, {"norm_ratio": None, "cosine": 1.0}]


def test_cosine_is_zero_when_the_aggregate_does_not_move_and_exact_for_small_steps() -> None:
    g = {"w": f32(0)}
    _, still = aggregate("mean", g, [dense(1, w=[1]), dense(1, w=[-1])])  # step 0
    assert [s["cosine"] for s in still] == [0.0, 0.0]
    _, small = aggregate("mean", g, [dense(1, w=[0.5]), dense(1, w=[0.25])])  # step 0.375: squared 0.14 < 1
    assert [s["cosine"] for s in small] == [1.0, 1.0]


def test_weight_zero_replies_score_nothing_and_stay_out_of_the_median() -> None:
    g = {"w": f32(0)}
    replies = [dense(0, w=[100]), dense(1, w=[1]), dense(1, w=[3])]  # live norms 1, 3: median 2
    agg, scores = aggregate("mean", g, replies)
    assert scores[0] == {} and scores[1]["norm_ratio"] == 0.5 and scores[2]["norm_ratio"] == 1.5
    assert anomaly(g, replies, agg.arrays)[0] == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no median of an empty list
        assert anomaly(g, [dense(0, w=[1])], {"w": f32(0)}) == [{}]


def test_median_aggregates_every_float_tensor_after_an_integer_one() -> None:
    g = {"steps": np.array(3, np.int64), "w": f32(0)}
    replies = [Contribution(1, {"steps": np.array(9, np.int64), "w": f32(v)}) for v in (1, 5, 2)]
    agg, scores = aggregate("median", g, replies)
    assert int(agg.arrays["steps"]) == 3 and agg.arrays["w"][0] == 2.0
    assert [s["norm_ratio"] for s in scores] == [0.5, 2.5, 1.0]  # updates 1, 5, 2 of w (median 2); the integer tensor skipped


def test_a_tensor_with_one_contributor_takes_its_values() -> None:
    g = {"w": f32(0, 0), "head": f32(7, 7)}
    replies = [dense(1, w=[1, 1], head=[2, 4]), dense(1, w=[3, 3])]
    agg, _ = aggregate("median", g, replies)
    np.testing.assert_array_equal(agg.arrays["head"], f32(2, 4))
    assert agg.counts["head"].dtype.kind == "i" and list(agg.counts["head"]) == [1, 1]


def test_two_dimensional_masks_and_counts_keep_the_tensor_shape() -> None:
    g = {"m": np.zeros((2, 2), np.float32)}
    masks = [np.array([[1, 1], [0, 0]], bool), np.array([[1, 0], [1, 0]], bool), np.array([[1, 1], [1, 0]], bool)]
    values = [f32(1, 2), f32(5, 6), f32(3, 4, 8)]
    agg, _ = aggregate("median", g, [Contribution(1, {"m": v}, {"m": m}) for v, m in zip(values, masks, strict=True)])
    # (0,0): median(1, 5, 3) = 3; (0,1): mean(2, 4) = 3; (1,0): mean(6, 8) = 7; (1,1): nobody
    np.testing.assert_array_equal(agg.arrays["m"], np.array([[3, 3], [7, 0]], np.float32))
    np.testing.assert_array_equal(agg.counts["m"], [[3, 2], [2, 0]])


def test_left_out_shares_add_up_over_tensors_and_coordinates() -> None:
    g = {"u": f32(0), "v": f32(0)}
    replies = [dense(1, u=[1], v=[1]), dense(1, u=[2], v=[3]), dense(1, u=[3], v=[2])]
    _, shares = coordinate_wise(g, replies, 1.0, None)
    # u keeps the second (2), v the third (2): first out twice, second and third once each
    assert shares == [1.0, 0.5, 0.5]
    g3 = {"w": f32(0, 0, 0)}
    replies3 = [dense(1, w=[2, 2, 1]), dense(1, w=[1, 3, 2]), dense(1, w=[3, 1, 3])]
    _, shares3 = coordinate_wise(g3, replies3, 1.0, None)
    assert shares3 == [0.3333, 0.6667, 1.0]  # the first kept at coordinates 0 and 1
    _, none_sent = coordinate_wise(g, [dense(0, u=[1]), dense(1, u=[2])], 1.0, None)
    assert none_sent == [None, 0.0]


def test_trimmed_table_without_contributors_keeps_the_fallback() -> None:
    fallback = np.array([1.0, 2.0])
    avg, cnt, out_rows = trimmed_table(np.empty((0, 2)), fallback, 0.2)
    np.testing.assert_array_equal(avg, fallback)
    assert cnt.dtype == np.int64 and list(cnt) == [0, 0]
    assert out_rows.dtype == np.int64 and out_rows.shape == (0,)


def test_ties_among_many_contributors_keep_contributor_order() -> None:
    rng = np.random.default_rng(0)
    table = rng.integers(0, 3, (17, 4)).astype(np.float64)
    _, _, out_rows = trimmed_table(table, np.zeros(4), 0.2)
    expected = np.zeros(17, np.int64)
    for col in range(4):
        ranked = sorted(range(17), key=lambda r: table[r, col])  # Python's sort is stable
        t = math.floor(0.2 * 17)
        for r in ranked[:t] + ranked[17 - t :]:
            expected[r] += 1
    np.testing.assert_array_equal(out_rows, expected)
