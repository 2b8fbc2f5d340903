"""Where a round's metrics row goes besides metrics.jsonl: any number of row sinks (TensorBoard,
MLflow), each asked for by its own run-config key and opened before the first round, so a
missing optional package stops the run before any training."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from fedapp.core.config import RunConfig


class RowSink(Protocol):
    def add(self, row: Mapping[str, Any]) -> None:
        """One finished round's metrics row, as written to metrics.jsonl."""

    def close(self) -> None:
        """The run ended (finished or not): flush and release."""


class Sinks:
    """Several sinks as one."""

    def __init__(self, sinks: list[RowSink]):
        self.sinks = sinks

    def add(self, row: Mapping[str, Any]) -> None:
        for sink in self.sinks:
            sink.add(row)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def open_sinks(cfg: RunConfig) -> Sinks | None:
    """The sinks the run-config asks for (None: none, the default)."""
    sinks: list[RowSink] = []
    if cfg.tensorboard:
        from fedapp.server.tensorboard_sink import TensorBoardSink

        sinks.append(TensorBoardSink(cfg.run_dir))
    if cfg.mlflow_uri:
        from fedapp.server.mlflow_sink import MlflowSink

        sinks.append(MlflowSink(cfg.run_dir, cfg.mlflow_uri, cfg.resume))
    return Sinks(sinks) if sinks else None
