"""One metrics.jsonl row's round part, and the keys a method's own metrics may not take."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fedapp.server.strategy import EvalResult, RoundResult

CORE_KEYS = frozenset({
    "round", "accuracy", "loss", "clients", "failures", "bytes_up", "bytes_up_eval", "bytes_down", "coverage",
    "failed_pids", "failure_reasons", "eval_failures", "personalized_accuracy", "personalized_accuracy_min",
    "personalized_accuracy_max", "evaluated_clients", "aggregate_rejected", "train_seconds", "seconds", "roster_refused",
    "anomaly", "wire_bytes_up", "wire_bytes_down", "wire_bytes_clients", "mb_total", "downlink", "messages",
    "node_versions_differ", "replayed_pids",
})  # fmt: skip
"""The round loop's own metrics.jsonl keys; a method's metrics may not reuse one, nor one of the
time and energy keys the ledger adds after them (fedapp.energy.ledger; checked in ``RunSession.play_round``)."""


def check_method_metrics(metrics: Mapping[str, Any], taken: Iterable[str]) -> None:
    clash = sorted(set(metrics) & set(taken))
    if clash:
        raise ValueError(f"method metric(s) {clash} reuse core metrics.jsonl keys; rename them in the method's after_round")


def row_parts(rnd: int, acc: float, loss: float, result: RoundResult) -> tuple[list[tuple[str, Any]], int]:
    """A row's items without its evaluation, and where the evaluation's keys go (a method metric named
    like a core key is a bug in the method: ValueError, never an overwrite)."""
    check_method_metrics(result.method_metrics, CORE_KEYS)
    row: dict[str, Any] = {"round": rnd, "accuracy": acc, "loss": loss, **result.stats.row()}
    at = len(row)
    if result.rejected:
        row["aggregate_rejected"] = 1
    row.update(result.method_metrics)
    row["train_seconds"] = {str(p): m.get("train-seconds", 0.0) for p, m in sorted(result.stats.client_metrics.items())}
    return list(row.items()), at


def with_evaluation(items: list[tuple[str, Any]], at: int, evaluated: EvalResult) -> dict[str, Any]:
    """The row: its items with the evaluation's keys at ``at`` and its reasons after the round's own."""
    row = dict([*items[:at], *evaluated.stats.items(), *items[at:]])
    row["failure_reasons"] = [*row["failure_reasons"], *(r[:300] for r in evaluated.reasons)]
    return row


def round_row(rnd: int, acc: float, loss: float, result: RoundResult, evaluated: EvalResult) -> dict[str, Any]:
    """One metrics.jsonl row's round part: the core keys, the evaluation's, then the method's own."""
    return with_evaluation(*row_parts(rnd, acc, loss, result), evaluated)
