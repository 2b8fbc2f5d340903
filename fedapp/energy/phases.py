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
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from flwr.app import ConfigRecord, RecordDict

from fedapp.core.config import RunConfig
from fedapp.energy.auto import MeterSettings, process_sampler
from fedapp.energy.sampler import Mark, Sampler, Window, timed

if TYPE_CHECKING:
    import torch

STATE_KEY = "energy-meter"  # Context.state entry holding the node's last meter Mark


def client_meter(cfg: RunConfig, node_config: Mapping[str, Any], device: torch.device | None = None) -> Sampler | None:
    """This process's sampler: commands and paths from ``node_config``; NVML meters the GPU ``device`` is (fedapp.energy.auto)."""
    return process_sampler(MeterSettings.of(cfg, node_config, device))[0]


def phase(sampler: Sampler | None) -> AbstractContextManager[Window]:
    return sampler.window() if sampler is not None else timed()


def host_key(sampler: Sampler) -> int:
    text = f"{socket.gethostname()}|{sampler.describe()}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")  # < 2**53: exact as a float


def load_mark(state: RecordDict) -> Mark | None:
    rec = state.config_records.get(STATE_KEY)
    if rec is None:
        return None
    flat, sizes = [float(v) for v in rec["marks"]], [int(v) for v in rec["sizes"]]  # type: ignore[union-attr]
    marks, i = [], 0
    for n in sizes:
        marks.append(flat[i : i + n])
        i += n
    r = dict(rec)
    return Mark(int(r["meter"]), float(r["t"]), float(r["joules"]), float(r["seconds"]), int(r["sensors"]), marks)  # type: ignore[arg-type]


def save_mark(state: RecordDict, m: Mark) -> None:
    flat = [float(v) for mk in m.marks for v in mk]
    state[STATE_KEY] = ConfigRecord(
        {
            "meter": m.meter,
            "t": m.t,
            "joules": m.joules,
            "seconds": m.seconds,
            "sensors": m.sensors,
            "marks": flat,
            "sizes": [len(x) for x in m.marks],
        }
    )


def phase_metrics(name: str, w: Window, sampler: Sampler | None, pid: int, state: RecordDict | None = None) -> dict[str, float]:
    """Reply metrics of one phase; with a meter, also the node's span and meter total
    (continued from the Mark in ``state`` when this process is new, then updated there)."""
    out = {f"phase-{name}-s": w.seconds, f"phase-{name}-start": w.start, f"phase-{name}-end": w.end}
    if sampler is not None and w.joules is not None:
        rep, mark = sampler.report(pid, load_mark(state) if state is not None else None)
        if state is not None:
            save_mark(state, mark)
        out.update({f"phase-{name}-j": w.joules, "meter-span-j": rep.span_j, "meter-span-s": rep.span_s})
        out.update({"meter-total-j": rep.total_j, "meter-total-s": rep.total_s, "meter-id": float(rep.meter)})
        out["meter-host"] = float(host_key(sampler))
    return out
