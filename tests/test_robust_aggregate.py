"""Robust masked aggregation (fedapp/server/robust.py) against hand-computed values on small masked
replies, `mean` against masked_mean bit for bit, and the run-config keys that choose a rule."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedapp.core.aggregate import Contribution, masked_mean
from fedapp.core.config import ConfigError, RunConfig, parse
from fedapp.server.robust import AGGREGATIONS, aggregate
from tests.poisoning import run_poisoned


def masked(weight: float, values: list[float], mask: list[int]) -> Contribution:
    return Contribution(weight, {"w": np.array(values, np.float32)}, {"w": np.array(mask, bool)})


G: dict[str, np.ndarray] = {"w": np.full(5, 10.0, np.float32), "n": np.array(7, np.int64)}
# coordinate:            0     1    2   3   4      contributors: 5, 3, 2, 1, 0
REPLIES = [
    masked(1.0, [1, 2, 3, 4], [1, 1, 1, 1, 0]),  # A
    masked(5.0, [100, 20, 5], [1, 1, 1, 0, 0]),  # B (the largest weight: ignored by median / trimmed mean)
    masked(1.0, [-3, 6], [1, 1, 0, 0, 0]),  # C
    masked(1.0, [7], [1, 0, 0, 0, 0]),  # D
    masked(1.0, [2], [1, 0, 0, 0, 0]),  # E
]


def test_median_per_coordinate_over_its_contributors() -> None:
    agg, scores = aggregate("median", G, REPLIES)
    # 0: median(-3, 1, 2, 7, 100) = 2; 1: median(2, 6, 20) = 6; 2: two contributors -> mean(3, 5) = 4;
    # 3: one contributor -> 4; 4: nobody -> keeps 10
    np.testing.assert_array_equal(agg.arrays["w"], np.array([2, 6, 4, 4, 10], np.float32))
    np.testing.assert_array_equal(agg.counts["w"], [5, 3, 2, 1, 0])
    assert int(agg.arrays["n"]) == 7  # never averaged
    # left out: coord 0 keeps only E's 2 (A, B, C, D out); coord 1 keeps C's 6 (A, B out)
    assert [s["trimmed"] for s in scores] == [pytest.approx(2 / 4, abs=1e-4), pytest.approx(2 / 3, abs=1e-4), 0.5, 1.0, 0.0]


def test_trimmed_mean_trims_where_enough_contributors_else_takes_the_median() -> None:
    agg, scores = aggregate("trimmed-mean", G, REPLIES, trim_fraction=0.2)
    # 0: 5 contributors, t = floor(0.2 * 5) = 1: mean(1, 2, 7) = 10/3;  1: t = floor(0.6) = 0 -> median 6;
    # 2: mean(3, 5) = 4 (unweighted: B's weight 5 would give 4.667);  3: 4;  4: keeps 10
    np.testing.assert_allclose(agg.arrays["w"], [10 / 3, 6, 4, 4, 10], rtol=1e-6)
    np.testing.assert_array_equal(agg.counts["w"], [5, 3, 2, 1, 0])
    # left out: coord 0 C (-3) and B (100); coord 1 A (2) and B (20)
    assert [s["trimmed"] for s in scores] == [0.25, pytest.approx(2 / 3, abs=1e-4), 0.5, 0.0, 0.0]
    wide, _ = aggregate("trimmed-mean", G, REPLIES, trim_fraction=0.4)  # t = 2 at coord 0: the median
    assert wide.arrays["w"][0] == 2.0


def test_norm_bound_clips_to_a_multiple_of_the_median_update_norm() -> None:
    g = {"w": np.zeros(4, np.float32)}
    replies = [
        Contribution(1.0, {"w": np.array([3, 4, 0, 0], np.float32)}),  # norm 5
        Contribution(1.0, {"w": np.array([0, 0, 6, 8], np.float32)}),  # norm 10
        masked(2.0, [30, 40], [1, 1, 0, 0]),  # norm 50: clipped to 2 x median(5, 10, 50, 1) = 15, i.e. x 0.3 -> (9, 12)
        masked(1.0, [-1], [0, 0, 1, 0]),  # norm 1
    ]
    agg, scores = aggregate("norm-bound", g, replies, norm_factor=2.0)
    # weighted masked mean of the bounded replies: (3 + 0 + 2*9)/4, (4 + 0 + 2*12)/4, (0 + 6 - 1)/3, (0 + 8)/2
    np.testing.assert_allclose(agg.arrays["w"], [5.25, 7.0, 5 / 3, 4.0], rtol=1e-6)
    assert [s.get("clip") for s in scores] == [None, None, 0.3, None]
    assert [s["norm_ratio"] for s in scores] == [pytest.approx(5 / 7.5, abs=1e-4), pytest.approx(10 / 7.5, abs=1e-4),
                                                 pytest.approx(50 / 7.5, abs=1e-4), pytest.approx(1 / 7.5, abs=1e-4)]  # fmt: skip
    step = np.array([5.25, 7.0, 5 / 3, 4.0])
    assert scores[0]["cosine"] == pytest.approx((3 * 5.25 + 4 * 7.0) / (5 * np.linalg.norm(step)), abs=1e-4)
    assert scores[2]["cosine"] == pytest.approx(1.0)  # (30, 40) is parallel to the step's (5.25, 7) on its coordinates
    assert scores[3]["cosine"] == pytest.approx(-1.0)
    loose, loose_scores = aggregate("norm-bound", g, replies, norm_factor=10.0)  # bound 75: nobody clipped -> the plain masked mean
    assert np.array_equal(loose.arrays["w"], masked_mean(g, replies).arrays["w"])
    assert all("clip" not in s for s in loose_scores)


def test_mean_is_masked_mean_bit_for_bit_and_scores_every_client() -> None:
    rng = np.random.default_rng(3)
    shapes = {"fc": (10, 40), "b": (10,)}
    g = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    coord = rng.random(shapes["fc"]) < 0.4
    replies = [Contribution(w, {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}) for w in (3.0, 0.7, 12.0)]
    replies.append(Contribution(5.0, {"fc": rng.standard_normal(int(coord.sum())).astype(np.float32)}, {"fc": coord}))
    replies.append(Contribution(0.0, {"b": np.full(10, 1e6, np.float32)}))  # weight 0: counted by no rule, scored as {}
    for server_lr in (1.0, 0.3):
        ours, scores = aggregate("mean", g, replies, server_lr)
        theirs = masked_mean(g, replies, server_lr)
        for k in shapes:
            assert np.array_equal(ours.arrays[k], theirs.arrays[k]) and np.array_equal(ours.counts[k], theirs.counts[k])
        assert [bool(s) for s in scores] == [True, True, True, True, False]


def test_every_rule_applies_server_lr_and_ignores_zero_weight_replies() -> None:
    extreme = masked(0.0, [1e6, 1e6, 1e6, 1e6], [1, 1, 1, 1, 0])
    for kind in AGGREGATIONS:
        full, _ = aggregate(kind, G, REPLIES)
        half, _ = aggregate(kind, G, [*REPLIES, extreme], server_lr=0.5)
        # x_g - 0.5 (x_g - x_agg), with the zero-weight reply changing nothing
        np.testing.assert_allclose(half.arrays["w"], 10 - 0.5 * (10 - full.arrays["w"]), rtol=1e-6, err_msg=kind)
        assert half.arrays["w"][4] == 10.0 and half.counts["w"][0] == 5


def test_one_poisoned_reply_of_four_cannot_move_median_or_trimmed_mean_far() -> None:
    """Three similar honest updates and one scaled sign-flip: the robust rules stay within the
    honest values, the mean follows the attacker; the attacker has the largest norm ratio."""
    rng = np.random.default_rng(0)
    g = {"w": rng.standard_normal(50).astype(np.float32)}
    honest_step = rng.standard_normal(50)
    replies = [Contribution(1.0, {"w": (g["w"] + honest_step * (1 + 0.1 * i)).astype(np.float32)}) for i in range(3)]
    replies.append(Contribution(1.0, {"w": (g["w"] - 10 * honest_step).astype(np.float32)}))
    lo = np.minimum.reduce([r.values["w"] for r in replies[:3]])
    hi = np.maximum.reduce([r.values["w"] for r in replies[:3]])
    for kind in ("median", "trimmed-mean"):
        agg, scores = aggregate(kind, g, replies)
        assert np.all((agg.arrays["w"] >= lo - 1e-6) & (agg.arrays["w"] <= hi + 1e-6)), kind
        assert max(range(4), key=lambda i: scores[i]["norm_ratio"]) == 3
        assert scores[3]["trimmed"] == 1.0 and scores[3]["cosine"] < 0
    mean, scores = aggregate("mean", g, replies)
    assert np.dot(mean.arrays["w"] - g["w"], honest_step) < 0  # the mean steps against the honest direction
    assert scores[3]["norm_ratio"] > 8


def test_scores_of_a_non_finite_aggregate_stay_valid_json() -> None:
    """server-lr 1e300 overflows float32 (the strategy then keeps the old model): the scores say
    null for the cosine instead of writing NaN into the row."""
    for kind in AGGREGATIONS:
        agg, scores = aggregate(kind, G, REPLIES, server_lr=1e300)
        assert not np.isfinite(agg.arrays["w"]).all()
        assert all(s["cosine"] is None and s["norm_ratio"] is not None for s in scores), kind
        json.dumps(scores, allow_nan=False)


@pytest.mark.parametrize(
    ("key", "value"), [("aggregation", "krum"), ("trim-fraction", 0.5), ("trim-fraction", 0.0), ("norm-bound-factor", 0.0)]
)
def test_bad_aggregation_keys_are_refused_naming_the_value(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"'{key}' = {value!r}"):
        parse(RunConfig, {key: value})


def test_config_offers_exactly_the_rules_robust_implements() -> None:
    for kind in AGGREGATIONS:
        assert parse(RunConfig, {"aggregation": kind}).aggregation == kind
    assert RunConfig().aggregation == "mean" and math.isclose(RunConfig().trim_fraction, 0.2)


# -- whole runs: the real ClientApp on the in-process grid, one client poisoned (tests/poisoning.py) --

DIGITS = {"dataset": "digits", "partition": "iid", "mlp-hidden": "64,64", "lr": 0.1}


Rows = list[dict[str, Any]]


def run_rows(tmp_path: Path, name: str, attack: str, bad: set[int], over: dict[str, Any], rounds: set[int] | None = None) -> Rows:
    out = run_poisoned({**DIGITS, "run-dir": str(tmp_path / name), **over}, attack, bad, rounds)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_median_and_trimmed_mean_keep_accuracy_where_the_mean_is_poisoned(tmp_path: Path) -> None:
    """4 IID clients, 10 rounds, partition 1 sends global - 10 x its update every round: the mean
    falls to chance, median and trimmed mean learn; the rows name partition 1 as the anomaly."""
    over: dict[str, Any] = {"num-clients": 4, "num-server-rounds": 10}
    honest = run_rows(tmp_path, "honest", "flip10", set(), over)[-1]["accuracy"]
    poisoned = {kind: run_rows(tmp_path, kind, "flip10", {1}, {**over, "aggregation": kind}) for kind in ("mean", "median", "trimmed-mean")}
    assert honest > 0.6
    assert poisoned["mean"][-1]["accuracy"] < 0.2
    for kind in ("median", "trimmed-mean"):
        assert poisoned[kind][-1]["accuracy"] > honest - 0.2, kind
    for kind, rows in poisoned.items():
        for row in rows[:1] if kind == "mean" else rows:  # the mean's model is wrecked after round 1 (honest replies NaN)
            scores = row["anomaly"]
            assert (row["clients"], row["failures"]) == (4, 0)
            assert max(scores, key=lambda p: scores[p]["norm_ratio"]) == "1", (kind, row["round"])
            assert scores["1"]["norm_ratio"] > 5 and all(scores[p]["norm_ratio"] < 2 for p in "023")
            if kind != "mean":
                assert scores["1"]["trimmed"] > max(scores[p]["trimmed"] for p in "023")


def test_a_step_just_under_the_bound_is_flagged_and_the_honest_clients_stay(tmp_path: Path) -> None:
    """Partition 1 moves every entry by 0.99 x the step bound in round 1. Before: the mean blew the
    loss to ~1e10 and from round 2 the three honest replies were the ones dropped. Now the
    attacker's reply is the round's step outlier, and round 2 averages all four clients."""
    rows = run_rows(tmp_path, "walk", "walk", {1}, {"num-clients": 4, "num-server-rounds": 2}, rounds={1})
    assert (rows[0]["clients"], rows[0]["failed_pids"]) == (3, [1])
    assert "step outlier" in rows[0]["failure_reasons"][0]
    assert (rows[1]["clients"], rows[1]["failures"]) == (4, 0)
    assert rows[1]["loss"] < 2.5


def test_the_step_bound_scale_is_the_initial_models_and_cannot_be_walked(tmp_path: Path) -> None:
    """Two clients (no median to compare with): partition 1's round-1 step of 0.99 x the bound is
    averaged, moving the global model by ~5000. In round 2 it steps 0.99 x 10^4 x that raised
    scale: refused, because the scale is still the initial model's (1)."""
    rows = run_rows(tmp_path, "walk2", "walk", {1}, {"num-clients": 2, "num-server-rounds": 2})
    assert rows[0]["clients"] == 2
    assert 1 in rows[1]["failed_pids"]
    assert any("more than 10000 x the tensor's scale 1)" in r for r in rows[1]["failure_reasons"]), rows[1]["failure_reasons"]


@pytest.mark.parametrize(
    ("method", "kind"),
    [("fedspu", "median"), ("fjord", "trimmed-mean"), ("feddrop", "norm-bound"), ("fedselect", "median"), ("fedpews", "trimmed-mean")],
)
def test_masked_methods_run_under_each_rule(tmp_path: Path, method: str, kind: str) -> None:
    """Round 1's replies do not depend on the rule (every client starts from the same model), so
    its coverage (which coordinates had a contributor) equals the mean's, and every client is scored."""
    over: dict[str, Any] = {"method": method, "num-clients": 3, "num-server-rounds": 2, "local-steps": 4, "mlp-hidden": "32"}
    mean = run_rows(tmp_path, "mean", "flip", set(), over)
    robust = run_rows(tmp_path, kind, "flip", set(), {**over, "aggregation": kind})
    assert robust[0]["coverage"] == mean[0]["coverage"]
    for row in robust:
        assert (row["clients"], row["failures"]) == (3, 0) and math.isfinite(row["loss"])
        assert sorted(row["anomaly"]) == ["0", "1", "2"]
        assert (kind == "norm-bound") or all("trimmed" in s for s in row["anomaly"].values())
