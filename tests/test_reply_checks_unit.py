"""Each reply check alone, on hand-built records and contributions, at its boundaries and with
its exact message: what a node may send is decided here before anything is decoded or averaged
(whole-run tests in test_faults.py and test_reply_coverage.py drive the same checks through the
round loop; these are fast enough to mutation-test fedapp/server/reply_checks.py)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedapp.core.aggregate import Contribution
from fedapp.server.reply_checks import (
    MAX_KEY,
    MAX_METRICS,
    MAX_STEP,
    NPY_HEADER,
    STEP_SPREAD,
    ReplyError,
    aggregate_fault,
    check_arrays,
    decode_record,
    metrics_of,
    partition_of,
    record_types,
    reply_step,
    sample_count,
    scales,
    step_outliers,
    within_task,
)


def refused(match: str) -> Any:
    return pytest.raises(ReplyError, match="^" + re.escape(match) + "$")


def arrays(**values: np.ndarray) -> ArrayRecord:
    return ArrayRecord({k: Array(v) for k, v in values.items()})


def test_constants_are_the_documented_bounds() -> None:
    assert (MAX_METRICS, MAX_KEY, NPY_HEADER, MAX_STEP, STEP_SPREAD) == (256, 200, 1024, 1e4, 1e3)


def test_record_types_allows_named_records_of_their_type_only() -> None:
    allowed: dict[str, type] = {"values": ArrayRecord, "metrics": MetricRecord}
    record_types(RecordDict({"values": arrays(w=np.zeros(2, np.float32)), "metrics": MetricRecord({"a": 1.0})}), allowed)
    extra = arrays(w=np.zeros(2, np.float32))
    with refused(f"unknown record 'extra' (ArrayRecord, {extra.count_bytes()} entries/bytes) refused undecoded"):
        record_types(RecordDict({"extra": extra}), allowed)
    with refused("unknown record 'note' (ConfigRecord, 2 entries/bytes) refused undecoded"):
        record_types(RecordDict({"note": ConfigRecord({"a": "x", "b": "y"})}), allowed)
    with refused("record 'metrics' is a ConfigRecord, expected a MetricRecord"):
        record_types(RecordDict({"metrics": ConfigRecord({"a": 1.0})}), allowed)


def test_metrics_are_at_most_max_metrics_numbers_with_short_names() -> None:
    full: dict[str, Any] = {f"m{i}": float(i) for i in range(MAX_METRICS)}
    assert metrics_of(RecordDict({"metrics": MetricRecord(full)})) == full  # exactly the limit passes
    assert metrics_of(RecordDict({"eval": MetricRecord({"n": 3})}), "eval") == {"n": 3.0}
    with refused(f"{MAX_METRICS + 1} metrics, more than the {MAX_METRICS} allowed"):
        metrics_of(RecordDict({"metrics": MetricRecord({**full, "one-more": 1.0})}))
    assert metrics_of(RecordDict({"metrics": MetricRecord({"k" * MAX_KEY: 1.0})})) == {"k" * MAX_KEY: 1.0}
    with refused(f"a metric name of {MAX_KEY + 1} characters (at most {MAX_KEY})"):
        metrics_of(RecordDict({"metrics": MetricRecord({"k" * (MAX_KEY + 1): 1.0})}))
    with refused("no 'metrics' MetricRecord (got NoneType)"):
        metrics_of(RecordDict({}))
    with refused("no 'eval' MetricRecord (got ConfigRecord)"):
        metrics_of(RecordDict({"eval": ConfigRecord({"a": 1})}), "eval")
    with refused("metric 'flag' is a list, expected a number"):
        metrics_of(RecordDict({"metrics": MetricRecord({"flag": [1.0, 2.0]})}))


def test_partition_is_the_one_sent_to_that_node() -> None:
    sent = {0: 11, 1: 12, 2: 13}
    assert partition_of({"partition-id": 1.0}, 12, sent) == 1
    for raw in (None, 1.5, float("nan"), float("inf")):
        metrics = {} if raw is None else {"partition-id": raw}
        with refused(f"partition-id {raw!r} is not a whole number"):
            partition_of(metrics, 12, sent)
    with refused("claims partition-id 2, but node 12 was sent the task of partition 1"):
        partition_of({"partition-id": 2.0}, 12, sent)
    with refused("claims partition-id 0, but node 99 was sent the task of partition none"):
        partition_of({"partition-id": 0.0}, 99, sent)


def test_sample_count_is_a_whole_number_within_the_partition() -> None:
    assert sample_count({"num-examples": 1.0}, 40) == 1.0
    assert sample_count({"num-examples": 40.0}, 40) == 40.0
    for n, shown in [(0.0, "0"), (41.0, "41"), (2.5, "2.5"), (float("nan"), "nan"), (float("inf"), "inf"), (None, "missing")]:
        metrics = {} if n is None else {"num-examples": n}
        with refused(f"num-examples = {shown} is not allowed: the partition holds 40 training samples (expected 1..40)"):
            sample_count(metrics, 40)
    with refused("num-examples = 9 is not allowed: the partition holds 8 test samples (expected 1..8)"):
        sample_count({"num-examples": 9.0}, 8, "test")


def test_check_arrays_bounds_each_named_array_by_its_data_plus_one_header() -> None:
    w = np.zeros(4, np.float32)  # 16 bytes of data, 128 of header
    check_arrays(arrays(w=w), {"w": 16}, "values")
    check_arrays(arrays(w=w), {"w": len(Array(w).data) - NPY_HEADER}, "values")  # exactly at the bound
    size = len(Array(w).data)
    with refused(f"values/w: {size} bytes, more than the {size - NPY_HEADER - 1} its task allows"):
        check_arrays(arrays(w=w), {"w": size - NPY_HEADER - 1}, "values")
    with refused(f"values: unexpected array 'x' ({size} bytes) refused undecoded"):
        check_arrays(arrays(x=w), {"w": 16}, "values")
    foreign = ArrayRecord({"w": Array(dtype="float32", shape=(4,), stype="torch.raw", data=b"\0" * 16)})
    with refused("values/w: serialisation 'torch.raw', expected numpy.ndarray"):
        check_arrays(foreign, {"w": 16}, "values")


def test_decode_record_wants_exactly_the_specs_arrays_shapes_dtypes_and_finite_floats() -> None:
    spec = {"score": ((2, 3), "float32"), "seen": ((4,), "int64")}
    good: dict[str, np.ndarray] = {"score": np.ones((2, 3), np.float32), "seen": np.arange(4)}
    out = decode_record(arrays(**good), spec, "pews")
    assert set(out) == {"score", "seen"} and out["score"].shape == (2, 3) and out["seen"].dtype == np.int64
    with refused("pews: arrays ['score'], expected ['score', 'seen']"):
        decode_record(arrays(score=good["score"]), spec, "pews")
    with refused("pews/score: float64 (2, 3), expected float32 (2, 3)"):
        decode_record(arrays(score=np.ones((2, 3)), seen=good["seen"]), spec, "pews")
    with refused("pews/score: float32 (3, 2), expected float32 (2, 3)"):
        decode_record(arrays(score=np.ones((3, 2), np.float32), seen=good["seen"]), spec, "pews")
    bad = good["score"].copy()
    bad[1, 2] = np.nan
    with refused("pews/score: non-finite values"):
        decode_record(arrays(score=bad, seen=good["seen"]), spec, "pews")
    big = np.ones(4 + NPY_HEADER, np.int64)  # far more data than 4 int64
    with pytest.raises(ReplyError, match=r"^pews/seen: \d+ bytes, more than the 32 its task allows$"):
        decode_record(arrays(score=good["score"], seen=big), spec, "pews")


def test_scales_are_one_or_the_largest_magnitude_of_float_tensors() -> None:
    got = scales({"small": np.array([0.5, -0.25], np.float32), "big": np.array([3.0, -7.0]), "empty": np.zeros(0, np.float32),
                  "steps": np.array(9, np.int64)})  # fmt: skip
    assert got == {"small": 1.0, "big": 7.0, "empty": 1.0}


def test_reply_step_is_the_largest_entry_move_in_scale_units_and_bounded() -> None:
    g: dict[str, np.ndarray] = {"w": np.array([0.0, 10.0, 0.0], np.float32), "b": np.zeros(2, np.float32), "n": np.array(1, np.int64)}
    scale = scales(g)  # w: 10, b: 1
    masked = Contribution(1, {"w": np.array([13.0, -5.0], np.float32), "n": np.array(50, np.int64)}, {"w": np.array([0, 1, 1], bool)})
    assert reply_step(masked, g, scale) == 0.5  # |-5 - 0| / 10 at the masked coordinates (1, 2); the int tensor ignored
    assert reply_step(Contribution(1, {"w": g["w"], "b": np.array([0.0, -4.0], np.float32)}), g, scale) == 4.0
    assert reply_step(Contribution(1, {}), g, scale) == 0.0
    at_bound = Contribution(1, {"b": np.array([MAX_STEP, 0.0], np.float32)})
    assert reply_step(at_bound, g, scale) == MAX_STEP
    with refused("b: an entry moves by 1e+04, more than 10000 x the tensor's scale 1"):
        reply_step(Contribution(1, {"b": np.array([0.0, MAX_STEP + 1], np.float32)}), g, scale)
    with refused("w: an entry moves by inf, more than 10000 x the tensor's scale 10"):
        reply_step(Contribution(1, {"w": np.array([np.inf, 10, 0], np.float32)}), g, scale)


def test_within_task_counts_dense_masked_and_unknown_tensors_outside_the_task() -> None:
    allowed = {"a": np.array([1, 1, 0, 0], bool), "b": np.array([[1, 0], [0, 0]], bool), "c": np.ones(3, bool)}
    ok = Contribution(1, {"a": np.ones(2, np.float32), "c": np.ones(3, np.float32)}, {"a": np.array([1, 0, 0, 0], bool)})
    within_task(ok, allowed)
    within_task(Contribution(1, {"z": np.ones(5, np.float32)}), None)  # no restriction
    dense_a = Contribution(1, {"a": np.ones(4, np.float32)})  # dense: the 2 entries outside count
    with refused("values: 2 entries outside its task in 1 tensors (a: 2)"):
        within_task(dense_a, allowed)
    masked_b = Contribution(1, {"b": np.ones(3, np.float32)}, {"b": np.array([[1, 1], [1, 0]], bool)})
    with refused("values: 2 entries outside its task in 1 tensors (b: 2)"):
        within_task(masked_b, allowed)
    many = Contribution(
        1,
        {"a": np.ones(4, np.float32), "b": np.ones(3, np.float32), "x": np.ones(5, np.float32), "y": np.ones(2, np.float32)},
        {"b": np.array([[0, 1], [1, 1]], bool)},
    )
    # a: 2 outside, b: 3, x: 5 (not in the task at all), y: 2; the three largest shown, ties by name
    with refused("values: 12 entries outside its task in 4 tensors (x: 5, b: 3, a: 2, ...)"):
        within_task(many, allowed)
    three = Contribution(1, {"a": np.ones(4, np.float32), "y": np.ones(2, np.float32), "x": np.ones(1, np.float32)})
    with refused("values: 5 entries outside its task in 3 tensors (a: 2, y: 2, x: 1)"):
        within_task(three, allowed)


def test_step_outliers_are_replies_beyond_spread_times_the_median() -> None:
    assert step_outliers([0.0, 5e9]) == {}  # two replies: never
    assert step_outliers([1.0, 1.0, 1000.0]) == {}  # exactly STEP_SPREAD x the median: not beyond
    assert step_outliers([0.0, 0.0, 7.0]) == {}  # median 0: nothing flagged
    flagged = step_outliers([1.0, 2.0, 2.0, 3000.0, 1.5])
    assert flagged == {3: "step 3e+03 is 1.5e+03 x the round's median step 2 (at most 1000 x)"}
    assert list(step_outliers([0.001, 2.0, 2.5, 2.0, 2001.0, 9000.0, 2.2])) == [5]


def test_aggregate_fault_names_the_first_non_finite_float_tensor() -> None:
    assert aggregate_fault({"w": np.ones(3, np.float32), "n": np.array(2**62, np.int64)}) is None
    assert aggregate_fault({"w": np.ones(3, np.float32), "v": np.array([1.0, np.inf])}) == "v: non-finite values"
    assert aggregate_fault({"u": np.array([np.nan], np.float32), "v": np.array([np.inf])}) == "u: non-finite values"


def test_messages_show_at_most_their_stated_lengths() -> None:
    with refused(f"metric {'k' * 40!r} is a list, expected a number"):
        metrics_of(RecordDict({"metrics": MetricRecord({"k" * 60: [1.0]})}))
    w = np.zeros(2, np.float32)
    size = len(Array(w).data)
    with refused(f"values: unexpected array {'x' * 80!r} ({size} bytes) refused undecoded"):
        check_arrays(arrays(**{"x" * 90: w}), {"w": 8}, "values")
    foreign = ArrayRecord({"w": Array(dtype="float32", shape=(2,), stype="s" * 50, data=b"\0" * 8)})
    with refused(f"values/w: serialisation {'s' * 40!r}, expected numpy.ndarray"):
        check_arrays(foreign, {"w": 8}, "values")
    names = [f"a{i:02d}" for i in range(12)]
    spec: dict[str, tuple[tuple[int, ...], str]] = {n: ((1,), "float32") for n in names}
    with refused(f"pews: arrays {names[:10]}, expected {names[:10]}"):
        decode_record(arrays(**{n: np.zeros(1, np.float32) for n in names[:11]}), spec, "pews")


def test_decode_record_bounds_each_array_by_its_own_dtypes_size() -> None:
    spec: dict[str, tuple[tuple[int, ...], str]] = {"score": ((2, 3), "float32")}  # 24 bytes of data
    big = np.ones(2000, np.float32)
    with refused(f"pews/score: {len(Array(big).data)} bytes, more than the 24 its task allows"):
        decode_record(arrays(score=big), spec, "pews")


def test_steps_of_two_dimensional_tensors_small_moves_and_integer_tensors_first() -> None:
    g: dict[str, np.ndarray] = {"n": np.array([1], np.int64), "m": np.zeros((2, 2), np.float32), "v": np.zeros(3, np.float32)}
    scale = scales(g)
    dense_2d = Contribution(1, {"n": np.array([7], np.int64), "m": np.array([[0.0, 0.25], [0.0, -0.125]], np.float32)})
    assert reply_step(dense_2d, g, scale) == 0.25  # below 1: no floor at 1; the integer tensor before it skipped
    masked_2d = Contribution(1, {"m": np.array([0.5], np.float32)}, {"m": np.array([[0, 0], [1, 0]], bool)})
    assert reply_step(masked_2d, g, scale) == 0.5
    nothing = Contribution(1, {"v": np.zeros(0, np.float32)}, {"v": np.zeros(3, bool)})
    assert reply_step(nothing, g, scale) == 0.0
    wide: dict[str, np.ndarray] = {"w": np.array([10.0, 0.0], np.float32)}  # scale 10: the bound is 1e5
    assert reply_step(Contribution(1, {"w": np.array([10.0, 2e4], np.float32)}), wide, scales(wide)) == 2e3


def test_ties_outside_the_task_are_shown_by_name_and_three_replies_can_have_an_outlier() -> None:
    allowed = {"a": np.array([1, 1, 0, 0], bool)}
    ties = Contribution(1, {"y": np.ones(2, np.float32), "a": np.ones(4, np.float32)})
    with refused("values: 4 entries outside its task in 2 tensors (a: 2, y: 2)"):
        within_task(ties, allowed)
    assert list(step_outliers([1.0, 1.0, 1001.0])) == [2]
    assert list(step_outliers([0.001, 0.001, 2.0])) == [2]  # a median below 1 still counts
