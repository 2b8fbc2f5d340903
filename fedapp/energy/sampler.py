"""Background sampling of a device's sensors into one cumulative-joules reading.

A daemon thread reads every sensor each ``interval`` seconds; a power reading adds
the trapezoid since the previous reading, an energy counter adds its increase. The
training code only takes marks (``window()``), each of which also reads the sensors
at once, so a window's joules are exact at its edges even when it is shorter than
the interval. Nothing is stored per sample: memory stays constant over any run.
"""

from __future__ import annotations

import atexit
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from fedapp.energy.base import Sensor

log = logging.getLogger("flwr")


@dataclass
class Window:
    """One measured phase: seconds (perf counter), joules (None without a meter), epoch edges."""

    seconds: float = 0.0
    joules: float | None = None
    start: float = 0.0  # time.time() at the start
    end: float = 0.0


class Sampler:
    def __init__(self, sensors: list[Sensor], interval: float, clock: Callable[[], float] = time.monotonic, thread: bool = True):
        self.sensors, self.interval, self.clock = list(sensors), interval, clock
        self.id = random.SystemRandom().randrange(1, 2**53)  # exact as a float metric
        self._lock = threading.Lock()
        self._last: list[tuple[float, float] | None] = [None] * len(self.sensors)
        self._cum = [0.0] * len(self.sensors)
        self._errors = 0
        self._spans: dict[int, tuple[float, float]] = {}  # pid -> (clock, cumulative joules) at its previous report
        self.samples = 0
        self.cpu_seconds = 0.0  # CPU time the sampling thread used
        self._stop = threading.Event()
        self.started = self.read_now()[0]
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._run, daemon=True, name="energy-sampler")
            self._thread.start()
            atexit.register(self.close)

    def describe(self) -> str:
        return " + ".join(s.describe() for s in self.sensors)

    def sample(self) -> float:
        """Read every sensor now; return joules since the sampler started."""
        return self.read_now()[1]

    def read_now(self) -> tuple[float, float]:
        """Read every sensor now; return (clock time of the reading, joules since the sampler started)."""
        with self._lock:
            t = self.clock()
            for i, s in enumerate(self.sensors):
                try:
                    v = s.read()
                except (OSError, ValueError) as err:
                    self._errors += 1
                    if self._errors in (1, 100, 10_000):
                        log.warning("energy meter %s: read failed (%s); keeping its last value", s.name, err)
                    continue
                last = self._last[i]
                if last is not None:
                    self._cum[i] += 0.5 * (v + last[1]) * (t - last[0]) if s.kind == "power" else v - last[1]
                self._last[i] = (t, v)
            self.samples += 1
            return t, sum(self._cum)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            c0 = time.thread_time()
            self.sample()
            self.cpu_seconds += time.thread_time() - c0

    @contextmanager
    def window(self) -> Iterator[Window]:
        """Seconds and joules between two readings (both on the sampler's clock)."""
        w = Window(start=time.time())
        t0, j0 = self.read_now()
        try:
            yield w
        finally:
            t1, j1 = self.read_now()
            w.seconds, w.joules, w.end = t1 - t0, j1 - j0, time.time()

    def span(self, pid: int) -> tuple[float, float, float, float]:
        """Since client ``pid`` last reported through this sampler (or since it started):
        (joules, seconds), then (joules, seconds) since the sampler started."""
        t, now = self.read_now()
        with self._lock:
            prev_t, prev_j = self._spans.get(pid, (self.started, 0.0))
            self._spans[pid] = (t, now)
        return now - prev_j, t - prev_t, now, t - self.started

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * self.interval + 1)
        for s in self.sensors:
            s.close()


@contextmanager
def timed() -> Iterator[Window]:
    """A window without a meter: seconds and epoch edges only."""
    w = Window(start=time.time())
    t0 = time.perf_counter()
    try:
        yield w
    finally:
        w.seconds, w.end = time.perf_counter() - t0, time.time()
