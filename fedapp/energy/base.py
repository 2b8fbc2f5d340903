"""What every meter back end is, and the one integration rule they share.

A back end is a *sensor*: ``read()`` returns either the present power in watts
(``kind = "power"``: Jetson rails, tegrastats, NVML power) or a monotone energy
counter in joules (``kind = "energy"``: RAPL, NVML total energy). The sampler turns
either into cumulative joules, so the client code never cares which it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedapp.core.config import ConfigError


class MeterUnavailable(ConfigError):
    """The requested meter does not exist on this device (message says what was looked for)."""


class Sensor:
    kind = "power"  # or "energy"
    name = "sensor"

    def read(self) -> float:
        """Watts now (power) or joules since some origin, never decreasing (energy)."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    @property
    def rails(self) -> list[str]:
        """The rails/domains/devices this sensor sums (matched against ``energy-rails``)."""
        return []

    def mark(self, last: float) -> list[float]:
        """What a later process needs to measure the energy from this reading to one of its own
        (deployment runs each ClientApp message in a new process); ``last`` is the last ``read()``."""
        return [last]

    def since(self, prev: list[float], nxt: list[float], dt: float) -> float | None:
        """Joules between two marks ``dt`` seconds apart; None when they cannot be compared.
        Power: linear between the two readings (the gap itself was not sampled); counters: exact."""
        if len(prev) != len(nxt):
            return None
        if self.kind == "power":
            return 0.5 * (prev[0] + nxt[0]) * dt
        d = nxt[0] - prev[0]
        return d if d >= 0 else None

    def accepts(self, entry: str) -> bool:
        """Whether an ``energy-rails`` entry names one of the rails this sensor sums."""
        return entry.upper() in {r.upper() for r in self.rails}

    def close(self) -> None:
        pass


def read_number(path: Path) -> float:
    """One number from a sysfs attribute file."""
    return float(path.read_text().strip())


def split_rails(text: str) -> list[str]:
    return [r.strip() for r in text.split(",") if r.strip()]


def integrate(t: Sequence[float] | np.ndarray, watts: Sequence[float] | np.ndarray, t0: float, t1: float) -> tuple[float, float]:
    """Joules of a sampled power trace over [t0, t1], and the covered share of the window.

    The trace is taken as piecewise linear between samples (trapezoid rule), the
    window edges are interpolated, and nothing is extrapolated: the part of the
    window outside the trace counts 0 J and lowers the coverage.
    """
    ts, ps = np.asarray(t, dtype=float), np.asarray(watts, dtype=float)
    if ts.size == 0 or t1 <= t0:
        return 0.0, 0.0
    lo, hi = max(t0, float(ts[0])), min(t1, float(ts[-1]))
    if hi <= lo:
        return 0.0, 0.0
    inner = ts[(ts > lo) & (ts < hi)]
    grid = np.concatenate(([lo], inner, [hi]))
    vals = np.interp(grid, ts, ps)
    joules = float(np.sum(0.5 * (vals[1:] + vals[:-1]) * np.diff(grid)))
    return joules, (hi - lo) / (t1 - t0)
