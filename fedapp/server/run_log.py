"""``<run-dir>/run.log``: what the server side of a run logs (Flower's ``flwr`` logger, the round
lines, the run's warnings, Python warnings raised while it runs), plain text, so a run's warnings
stay with its results instead of only on a console.

Records are held in memory from the start of ``serve`` and written once the folder may be used
(the run has started: lock held, discovery done), so the checks' warnings land in the file too,
and a start that never began writes nothing into a folder it may not touch. A resumed run
appends. Colour codes (Flower's console colours, rich markup passed through) never reach the file.
"""

from __future__ import annotations

import logging
import re
import time
import warnings
from pathlib import Path
from typing import Any, TextIO

FILE = "run.log"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves)."""
    return ANSI.sub("", text)


class RunLog(logging.Handler):
    """A handler on the ``flwr`` logger that buffers until ``open`` names the run folder."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)  # as Flower's console shows by default
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        self.buffer: list[str] = []
        self.stream: TextIO | None = None
        self.logger = logging.getLogger("flwr")
        self.logger.addHandler(self)
        self.shown = warnings.showwarning
        warnings.showwarning = self.warning

    def emit(self, record: logging.LogRecord) -> None:
        self.write(self.format(record))

    def write(self, line: str) -> None:
        line = plain(line).rstrip("\n") + "\n"
        if self.stream is None:
            self.buffer.append(line)
        else:
            self.stream.write(line)
            self.stream.flush()

    def warning(self, message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        """Python's warning shown as before, and a copy in run.log."""
        self.shown(message, category, filename, lineno, file, line)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self.write(f"{stamp} WARNING {category.__name__}: {message} ({filename}:{lineno})")

    def open(self, run_dir: Path, append: bool = False) -> Path:
        """Write what was held to ``<run_dir>/run.log`` (appending when resuming), then each record as it comes."""
        path = Path(run_dir) / FILE
        self.stream = path.open("a" if append else "w", encoding="utf-8")
        for line in self.buffer:
            self.stream.write(line)
        self.buffer.clear()
        self.stream.flush()
        return path

    def close(self) -> None:
        """Detach from the logger and from Python's warnings, and close the file."""
        self.logger.removeHandler(self)
        if warnings.showwarning == self.warning:
            warnings.showwarning = self.shown
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        super().close()


def plain_console() -> None:
    """Flower's console log without colour codes (a pipe or file is not a terminal)."""
    from flwr.common.logger import update_console_handler

    update_console_handler(colored=False)
