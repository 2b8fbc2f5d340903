"""Jetson power from ``tegrastats`` output: the fallback when sysfs rails are unreadable.

tegrastats prints one line per interval with ``RAIL current/average`` pairs in mW:
``POM_5V_IN 2211/2211`` on Nano (JetPack 4), ``VDD_IN 4926mW/4926mW`` on Orin.
The sensor runs the command (or follows a ``tegrastats --logfile`` file) in a
reader thread and reports the latest line's current values of the chosen rails.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from fedapp.energy.base import MeterUnavailable, Sensor
from fedapp.energy.jetson import choose

RAIL_RE = re.compile(r"(?<![\w@])([A-Z][A-Z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?(?=\s|$)")


def parse_line(line: str) -> dict[str, float]:
    """Rail name -> present power in watts, for every rail on one tegrastats line."""
    return {m.group(1): int(m.group(2)) / 1000.0 for m in RAIL_RE.finditer(line)}


class Tegrastats(Sensor):
    kind = "power"
    name = "jetson"

    def __init__(self, source: str = "tegrastats", rails: list[str] | None = None, interval: float = 0.1, wait: float = 5.0):
        """``source``: a command (``--interval <ms>`` is appended) or a log file to follow."""
        self.source = source
        self._latest: dict[str, float] = {}
        self._got = threading.Event()
        self._closed = False
        self._proc: subprocess.Popen[str] | None = None
        stream: IO[str]
        if Path(source).is_file():
            stream = Path(source).open()  # noqa: SIM115 - the reader thread closes it
        else:
            cmd = [*shlex.split(source), "--interval", str(max(1, round(interval * 1000)))]
            try:
                self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
            except (FileNotFoundError, PermissionError) as err:
                raise MeterUnavailable(f"cannot start tegrastats command {source!r} ({err})") from None
            assert self._proc.stdout is not None
            stream = self._proc.stdout
        self._thread = threading.Thread(target=self._follow, args=(stream, interval), daemon=True, name="tegrastats-reader")
        self._thread.start()
        if not self._got.wait(wait):
            self.close()
            raise MeterUnavailable(f"tegrastats source {source!r} printed no power rails within {wait:.0f}s")
        self.available = list(self._latest)
        self._rails = choose(self.available, rails or [])

    def _follow(self, stream: IO[str], interval: float) -> None:
        with stream:
            while not self._closed:
                line = stream.readline()
                if not line:
                    if self._proc is not None:  # the command ended
                        return
                    time.sleep(interval)  # a log file: wait for more
                    continue
                vals = parse_line(line)
                if vals:
                    self._latest = {**self._latest, **vals}
                    self._got.set()

    @property
    def rails(self) -> list[str]:
        return list(self._rails)

    def read(self) -> float:
        latest = self._latest
        return sum(latest.get(r, 0.0) for r in self._rails)

    def describe(self) -> str:
        return f"jetson rails {'+'.join(self._rails)} (tegrastats {self.source!r}; available: {', '.join(self.available)})"

    def close(self) -> None:
        self._closed = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
