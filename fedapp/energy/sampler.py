"""Background sampling of a device's sensors into one cumulative-joules reading.

A daemon thread reads every sensor each ``interval`` seconds; a power reading adds
the trapezoid since the previous reading, an energy counter adds its increase. The
training code only takes marks (``window()``), each of which also reads the sensors
at once, so a window's joules are exact at its edges even when it is shorter than
the interval. Nothing is stored per sample: memory stays constant over any run.

A client's *span* (``report``) is the energy since its previous reply. Flower's
deployment runs every ClientApp message in a new process, so the last reading is
also handed back as a ``Mark`` the caller keeps in the node's Context.state; a later
process picks it up and measures the gap between processes (exactly with counters,
linearly between the two readings with power rails), so a node's meter total and
identity stay continuous over the whole run.
"""

from __future__ import annotations

import atexit
import hashlib
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
    """One measured phase: seconds, joules (None without a meter), Unix-time edges."""

    seconds: float = 0.0
    joules: float | None = None
    start: float = 0.0  # time.time() at the start
    end: float = 0.0


@dataclass
class Mark:
    """A node's meter reading at its last reply (kept in Context.state between processes)."""

    meter: int  # meter identity the server counts once
    t: float  # sampler clock (CLOCK_MONOTONIC: shared by the processes of one boot)
    joules: float  # the node's meter total at t
    seconds: float  # seconds that total covers
    sensors: int  # which sensors (hash of their description)
    marks: list[list[float]]  # each sensor's own mark


@dataclass
class Report:
    span_j: float  # since this node's previous reply (or since its meter started)
    span_s: float
    total_j: float
    total_s: float
    meter: int


class Sampler:
    def __init__(self, sensors: list[Sensor], interval: float, clock: Callable[[], float] = time.monotonic, thread: bool = True):
        self.sensors, self.interval, self.clock = list(sensors), interval, clock
        self.id = random.SystemRandom().randrange(1, 2**53)  # exact as a float metric
        self.key = int.from_bytes(hashlib.sha256(self.describe().encode()).digest()[:6], "big")
        self._lock = threading.Lock()
        self._last: list[tuple[float, float] | None] = [None] * len(self.sensors)
        self._cum = [0.0] * len(self.sensors)
        self._errors = 0
        self._nodes: dict[int, tuple[int, float, float, float, float]] = {}  # pid -> (meter, offset J, offset s, J, s at last reply)
        self.samples = 0
        self.cpu_seconds = 0.0  # CPU time the sampling thread used
        self._stop = threading.Event()
        self.started, _, self._first = self._read()
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._run, daemon=True, name="energy-sampler")
            self._thread.start()
            atexit.register(self.close)

    def describe(self) -> str:
        return " + ".join(s.describe() for s in self.sensors)

    def sample(self) -> float:
        """Read every sensor now; return joules since the sampler started."""
        return self._read()[1]

    def read_now(self) -> tuple[float, float]:
        """Read every sensor now; return (clock time of the reading, joules since the sampler started)."""
        t, j, _ = self._read()
        return t, j

    def _read(self) -> tuple[float, float, list[list[float]]]:
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
            marks = [s.mark(last[1]) if (last := self._last[i]) is not None else [] for i, s in enumerate(self.sensors)]
            return t, sum(self._cum), marks

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

    def _gap(self, prev: Mark) -> float | None:
        """Joules from ``prev`` (an earlier process's reading) to this sampler's first reading."""
        if prev.sensors != self.key or not prev.t < self.started or len(prev.marks) != len(self.sensors):
            return None  # other sensors, this process's own mark, or another boot
        parts = [s.since(p, n, self.started - prev.t) for s, p, n in zip(self.sensors, prev.marks, self._first, strict=True)]
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)

    def report(self, pid: int, prev: Mark | None = None) -> tuple[Report, Mark]:
        """Node ``pid``'s meter since its previous reply; ``prev`` is the Mark it kept from then."""
        t, cum, marks = self._read()
        with self._lock:
            if pid not in self._nodes:
                gap = self._gap(prev) if prev is not None else None
                if prev is not None and gap is not None:  # continue the node's meter from an earlier process
                    offset = (prev.joules + gap, prev.seconds + self.started - prev.t)
                    self._nodes[pid] = (prev.meter, *offset, prev.joules, prev.seconds)
                else:
                    self._nodes[pid] = (self.id, 0.0, 0.0, 0.0, 0.0)
            meter, off_j, off_s, last_j, last_s = self._nodes[pid]
            total_j, total_s = off_j + cum, off_s + t - self.started
            self._nodes[pid] = (meter, off_j, off_s, total_j, total_s)
        return Report(total_j - last_j, total_s - last_s, total_j, total_s, meter), Mark(meter, t, total_j, total_s, self.key, marks)

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
