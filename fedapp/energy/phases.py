"""Client side of the accounting: measure a phase, turn it into reply metrics.

Every reply carries ``phase-<name>-s`` and the phase's Unix-time edges; with a meter
also ``phase-<name>-j``, ``meter-span-j`` / ``meter-span-s`` (joules and seconds since this
client's previous reply through the same meter: its whole round, waiting included),
``meter-total-j`` / ``meter-total-s`` (since the meter started) and
``meter-id`` / ``meter-host`` (so the server counts a meter shared by several
clients of one process once).
"""

from __future__ import annotations

import hashlib
import socket
from contextlib import AbstractContextManager

from fedapp.config import RunConfig
from fedapp.energy.auto import MeterSettings, process_sampler
from fedapp.energy.sampler import Sampler, Window, timed


def client_meter(cfg: RunConfig) -> Sampler | None:
    return process_sampler(MeterSettings.of(cfg))[0]


def phase(sampler: Sampler | None) -> AbstractContextManager[Window]:
    return sampler.window() if sampler is not None else timed()


def host_key(sampler: Sampler) -> int:
    text = f"{socket.gethostname()}|{sampler.describe()}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")  # < 2**53: exact as a float


def phase_metrics(name: str, w: Window, sampler: Sampler | None, pid: int) -> dict[str, float]:
    out = {f"phase-{name}-s": w.seconds, f"phase-{name}-start": w.start, f"phase-{name}-end": w.end}
    if sampler is not None and w.joules is not None:
        span_j, span_s, total_j, total_s = sampler.span(pid)
        out.update(
            {
                f"phase-{name}-j": w.joules,
                "meter-span-j": span_j,
                "meter-span-s": span_s,
                "meter-total-j": total_j,
                "meter-total-s": total_s,
            }
        )
        out.update({"meter-id": float(sampler.id), "meter-host": float(host_key(sampler))})
    return out
