"""GradSelect (spec fedselect §1.2, F4/F5/F16/F17) against hand-computed masks."""

from __future__ import annotations

import numpy as np
import pytest

from fedapp.methods.fedselect import grad_select, growth_count, top_k


@pytest.mark.parametrize(
    ("n", "n_personal", "rate", "limit", "want"),
    [
        (100, 0, 0.25, 0.3, 25),  # round(0.25 * 100)
        (100, 25, 0.25, 0.3, 5),  # round(18.75) = 19, capped at floor(30) - 25
        (100, 30, 0.25, 0.3, 0),  # 0.30 is not < 0.30
        (10, 0, 0.25, 0.3, 3),  # round(2.5) half up = 3 = cap
        (100, 0, 0.25, 0.0, 0),  # alpha = 0: never grows (FedAvg)
        (4, 0, 0.1, 1.0, 0),  # round(0.4) = 0: tiny tensors do not grow (F17)
        (100, 0, 0.25, 0.05, 5),  # capped, not the code's overshoot to 25
        (1000, 290, 0.25, 0.29, 0),  # floor(0.29 * 1000) = 290 despite float 289.99999
    ],
)
def test_growth_count(n: int, n_personal: int, rate: float, limit: float, want: int) -> None:
    assert growth_count(n, n_personal, rate, limit) == want


def test_most_changed_shared_coordinates_become_personal_ties_by_lowest_index() -> None:
    delta = {"w": np.array([0.1, -0.5, 0.5, 0.2, 0.9, 0.0, 0.3, 0.5])}
    m = {"w": np.array([0, 0, 0, 0, 1, 0, 0, 0], bool)}
    # 7 shared, rate 0.3 -> round(2.1) = 2; |delta| 0.5 at 1, 2, 7 -> lowest indices 1 and 2
    assert np.flatnonzero(grad_select(delta, m, 0.3, 1.0)["w"]).tolist() == [1, 2, 4]
    assert np.flatnonzero(grad_select(delta, m, 0.3, 1.0, "least")["w"]).tolist() == [0, 4, 5]
    rnd = grad_select(delta, m, 0.3, 1.0, "random", np.random.default_rng(0))["w"]
    assert rnd[4] and rnd.sum() == 3
    assert np.array_equal(m["w"], np.array([0, 0, 0, 0, 1, 0, 0, 0], bool))  # input untouched


def test_personal_count_follows_hand_computed_sequence() -> None:
    rng = np.random.default_rng(0)
    masks = {"a": np.zeros((10, 10), bool), "b": np.zeros(10, bool)}
    counts = []
    for _ in range(5):
        delta = {k: rng.normal(size=m.shape) for k, m in masks.items()}
        masks = grad_select(delta, masks, 0.25, 0.5)
        counts.append((int(masks["a"].sum()), int(masks["b"].sum())))
    # a: 0 -> 25 -> 25 + round(18.75) = 44 -> 44 + min(14, 50 - 44) = 50 -> stays
    # b: 0 -> round(2.5) = 3 -> 3 + round(1.75) = 5 -> 5/10 is not < 0.5: stays
    assert counts == [(25, 3), (44, 5), (50, 5), (50, 5), (50, 5)]


@pytest.mark.parametrize("rate", [0.05, 0.25, 0.6, 1.0])
@pytest.mark.parametrize("limit", [0.0, 0.05, 0.3, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("selection", ["most", "least", "random"])
def test_fraction_never_exceeds_limit_and_personal_stays_personal(rate: float, limit: float, selection: str) -> None:
    rng = np.random.default_rng(1)
    shapes = {"conv": (4, 3, 3, 3), "bias": (7,), "fc": (10, 33), "one": (1,)}
    masks = {k: np.zeros(s, bool) for k, s in shapes.items()}
    for _ in range(12):
        delta = {k: rng.normal(size=s) for k, s in shapes.items()}
        new = grad_select(delta, masks, rate, limit, selection, rng)
        for k, m in new.items():
            assert m.mean() <= limit + 1e-12, (k, m.mean(), limit)
            assert np.all(new[k][masks[k]]), f"{k}: a personal coordinate went back to global"
        masks = new
    if limit == 0.0:
        assert not any(m.any() for m in masks.values())
    if 0.3 <= limit <= 0.8 and rate >= 0.25:  # enough updates to reach the cap exactly on the big tensor
        assert masks["fc"].sum() == int(np.floor(limit * 330 + 1e-9))


def test_top_k_matches_a_stable_sort() -> None:
    rng = np.random.default_rng(2)
    for _ in range(50):
        score = rng.integers(0, 5, size=int(rng.integers(1, 40))).astype(float)  # many ties
        k = int(rng.integers(1, score.size + 1))
        want = np.sort(np.argsort(-score, kind="stable")[:k])
        assert np.array_equal(np.sort(top_k(score, k)), want)
