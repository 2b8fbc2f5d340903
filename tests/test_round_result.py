"""The round loop's row comes from what the strategy returned; a method metric never replaces a core key."""

from __future__ import annotations

import pytest
from flwr.app import ArrayRecord, MetricRecord

from fedapp.server.rows import CORE_KEYS, round_row
from fedapp.server.strategy import EvalResult, RoundResult, RoundStats


def result(method_metrics: dict[str, object]) -> RoundResult:
    stats = RoundStats(sent=2, clients=1, failures=1, bytes_up=10, bytes_down=20, coverage=0.5, reasons=["node 7: gone"])
    stats.failed_pids = [1]
    stats.client_metrics = {0: {"train-seconds": 1.5}}
    stats.wire_down, stats.wire_up = {0: 300, 1: 200}, {0: 40}
    stats.messages = {"train": 2, "evaluate": 1}
    return RoundResult(ArrayRecord(), MetricRecord({"clients": 1}), stats, method_metrics=method_metrics)


def test_row_holds_core_eval_and_method_keys_in_order() -> None:
    evaluated = EvalResult(stats={"eval_failures": 1}, reasons=["node 8: evaluation dropped (x)"])
    row = round_row(3, 0.25, 2.0, result({"warmup": True}), evaluated)
    assert row == {
        "round": 3, "accuracy": 0.25, "loss": 2.0, "clients": 1, "failures": 1, "bytes_up": 10, "bytes_up_eval": 0,
        "bytes_down": 20, "coverage": 0.5, "failed_pids": [1],
        "failure_reasons": ["node 7: gone", "node 8: evaluation dropped (x)"],
        "wire_bytes_down": 500, "wire_bytes_up": 40, "wire_bytes_clients": {"0": [300, 40], "1": [200, 0]}, "mb_total": 540 / 1e6,
        "messages": {"train": 2, "evaluate": 1}, "eval_failures": 1, "warmup": True, "train_seconds": {"0": 1.5},
    }  # fmt: skip
    assert list(row)[-3:] == ["eval_failures", "warmup", "train_seconds"]


@pytest.mark.parametrize("name", ["accuracy", "loss", "round", "clients", "failure_reasons", "personalized_accuracy"])
def test_method_metric_named_like_a_core_key_is_an_error(name: str) -> None:
    assert name in CORE_KEYS
    with pytest.raises(ValueError, match=rf"\['{name}'\] reuse core metrics.jsonl keys"):
        round_row(1, 0.5, 1.0, result({name: 0.9}), EvalResult())


def test_round_result_unpacks_as_flowers_pair() -> None:
    r = result({})
    arrays, metrics = r
    assert arrays is r.arrays and metrics is r.metrics and dict(metrics) == {"clients": 1}


def test_a_method_metric_named_like_a_ledger_key_is_an_error() -> None:
    from fedapp.energy.ledger import Ledger
    from fedapp.server.rows import check_method_metrics

    times = Ledger().round_row(1.0, 0.0, 1.0, {0: {"phase-train-s": 0.5}}, {})
    assert {"train_s", "wait_s", "time_start"} <= set(times)
    check_method_metrics({"warmup": True}, times)
    with pytest.raises(ValueError, match=r"\['train_s'\] reuse core metrics.jsonl keys"):
        check_method_metrics({"train_s": 2.0}, times)
