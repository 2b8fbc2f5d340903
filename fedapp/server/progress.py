"""How a run shows its progress: one log line per round (``flwr run``, logs), or a rich
progress bar with the time left (in-process runs and the grids, in a terminal).

The server loop calls a ``RoundReporter`` once per finished round with the metrics row
it has just written; what the user sees is chosen by whoever starts the loop.
"""

from __future__ import annotations

import logging
import statistics
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

log = logging.getLogger("flwr")


class RoundReporter(Protocol):
    def __call__(self, rnd: int, row: Mapping[str, Any]) -> None: ...


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``: short enough for a log line."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def time_left(round_seconds: list[float], rounds_left: int) -> float:
    """Rounds left times the median round so far (a slow first round, paying the imports, does not skew it)."""
    return rounds_left * statistics.median(round_seconds) if round_seconds else 0.0


class RoundLog:
    """One log line per round: outcome, round time and the time left."""

    def __init__(self, last_round: int):
        self.last_round = last_round
        self.seconds: list[float] = []

    def __call__(self, rnd: int, row: Mapping[str, Any]) -> None:
        self.seconds.append(float(row.get("seconds", 0.0)))
        left = time_left(self.seconds, self.last_round - rnd)
        log.info(
            "round %d/%d: accuracy %.4f loss %.4f clients %d failures %d (%s, %s left)",
            rnd, self.last_round, row["accuracy"], row["loss"], row["clients"], row["failures"], duration(self.seconds[-1]), duration(left),
        )  # fmt: skip


def interactive() -> bool:
    return sys.stderr.isatty()


@contextmanager
def logs_above(stream: Any) -> Iterator[None]:
    """Point Flower's console log handler at ``stream`` (rich's proxy while a bar shows), so
    log lines print above the bar instead of through it."""
    handlers = [h for h in logging.getLogger("flwr").handlers if isinstance(h, logging.StreamHandler)]
    old = [h.setStream(stream) for h in handlers]
    try:
        yield
    finally:
        for h, s in zip(handlers, old, strict=True):
            h.setStream(s)


def _columns(*middle: Any) -> tuple[Any, ...]:
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    head = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    # "0:00:12 elapsed, 0:01:30 left": each time named after it, so neither reads as the other
    return (*head, *middle, TimeElapsedColumn(), TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left"))


@contextmanager
def round_bar(last_round: int, label: str) -> Iterator[RoundReporter]:
    """A rich progress bar over the rounds, with the last accuracy and the time left; it
    replaces the per-round log line."""
    from rich.progress import Progress, TextColumn

    with Progress(*_columns(TextColumn("{task.fields[acc]}"))) as bar, logs_above(sys.stderr):
        task = bar.add_task(label, total=last_round, acc="")

        def report(rnd: int, row: Mapping[str, Any]) -> None:
            bar.update(task, completed=rnd, acc=f"accuracy {row['accuracy']:.4f}")

        yield report


class GridProgress:
    """A grid's runs as one bar; ``done`` prints a run's line above it and advances."""

    def __init__(self, bar: Any, task: Any):
        self.bar, self.task = bar, task

    def done(self, line: str) -> None:
        self.bar.console.print(line, highlight=False)
        self.bar.advance(self.task)


def quiet_rounds() -> None:
    """Inside a grid: Flower's log at warnings only (the grid's bar shows the progress)."""
    import flwr.common.logger  # noqa: F401  (sets the "flwr" logger's level when first imported: before ours)

    logging.getLogger("flwr").setLevel(logging.WARNING)


@contextmanager
def grid_bar(total: int, label: str = "runs") -> Iterator[GridProgress]:
    from rich.progress import Progress

    with Progress(*_columns()) as bar:
        yield GridProgress(bar, bar.add_task(label, total=total))
