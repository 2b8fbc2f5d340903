"""What a run prints besides its rounds: one short line each for the clients' energy meters
and training devices (the full text is in the run's meters.json and devices.json), and Ray's start-up FutureWarning
about accelerator variables silenced (fedapp leaves that Ray behaviour as it is)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping

log = logging.getLogger("flwr")


def ranges(ids: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2,5,7-8``."""
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def short_meter(text: str, limit: int = 80) -> str:
    """A meter's description without its parenthesised details, at most ``limit`` characters."""
    head = text.split(" (", 1)[0]
    return head if len(head) <= limit else head[: limit - 1] + "…"


def clients_line(what: str, facts: Mapping[str, str], details: str) -> str:
    """One line for a per-client fact, clients grouped by value: ``device on all 10 clients:
    cpu (details: devices.json)``, or ``devices: clients 0-3: cuda:0; clients 4-7: cpu (...)``."""
    by_text: dict[str, list[int]] = {}
    for pid, text in facts.items():
        by_text.setdefault(text, []).append(int(pid))
    if len(by_text) == 1:
        ((text, pids),) = by_text.items()
        return f"{what} on all {len(pids)} clients: {text} (details: {details})"
    parts = [f"clients {ranges(p)}: {t}" for t, p in sorted(by_text.items(), key=lambda tp: min(tp[1]))]
    return f"{what}s: " + "; ".join(parts) + f" (details: {details})"


def meters_line(meters: Mapping[str, str]) -> str:
    """One line for every client's meter: ``energy meter on all 10 clients: ...``."""
    return clients_line("energy meter", {pid: short_meter(text) for pid, text in meters.items()}, "meters.json")


def log_meters(meters: Mapping[str, str]) -> None:
    if meters:
        log.info("%s", meters_line(meters))


def log_devices(devices: Mapping[str, str]) -> None:
    if devices:
        log.info("%s", clients_line("device", devices, "devices.json"))


def quiet_ray() -> None:
    """Silence Ray's "Tip: In future versions of Ray, Ray will no longer override accelerator
    visible devices env var ..." FutureWarning, printed by ``ray.init`` in the simulation
    process. Setting RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0 would also silence it but change
    which GPUs a zero-GPU worker sees; the filter keeps Ray's current behaviour."""
    warnings.filterwarnings("ignore", message=r"Tip: In future versions of Ray", category=FutureWarning)
