"""Optional TensorBoard output (run-config ``tensorboard = true``): every number of each
round's metrics row, as written to metrics.jsonl, also goes to ``<run-dir>/tensorboard``
as a scalar at step = round. Off by default; the ``tensorboard`` package is not a
dependency of fedapp, and a run that asks for it without the package installed stops
before its first round with one line saying how to install it. One of the row sinks (fedapp.server.row_sinks)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedapp.core.config import ConfigError

FOLDER = "tensorboard"


class TensorBoardSink:
    def __init__(self, run_dir: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(
                "run-config key 'tensorboard' = true needs the tensorboard package, which is not installed: "
                "pip install tensorboard (or pip install -e '.[tensorboard]')"
            ) from None
        self.make = lambda: SummaryWriter(log_dir=str(Path(run_dir) / FOLDER))
        self.writer: Any = None  # made with the first row: checking for the package touches no file

    def add(self, row: Mapping[str, Any]) -> None:
        """Each finite number in ``row`` (not ``round``, not nested per-client tables) at step = round."""
        if self.writer is None:
            self.writer = self.make()
        step = int(row["round"])
        for key, value in row.items():
            if key != "round" and isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
