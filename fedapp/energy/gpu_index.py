"""The NVML index of the GPU a torch device trains on.

CUDA numbers the GPUs a process sees (CUDA_VISIBLE_DEVICES renumbers them: under Ray a
ClientApp's ``cuda:0`` may be the machine's third GPU); NVML numbers every GPU of the
machine. The two are matched by UUID, else by PCI address, else through
CUDA_VISIBLE_DEVICES, so ``energy-meter=auto`` meters the GPU that really trains.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch

from fedapp.energy.base import MeterUnavailable
from fedapp.energy.nvml import load_nvml

PciAddress = tuple[int, int, int]  # (domain, bus, device)


def _uuid(text: str) -> str:
    t = text.strip().lower()
    return t.split("-", 1)[1] if t.startswith(("gpu-", "mig-")) else t


def parse_bus_id(text: str) -> PciAddress | None:
    """NVML's ``"00000000:3B:00.0"`` as (domain, bus, device)."""
    try:
        domain, bus, rest = text.strip().split(":")
        return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


def match_index(
    uuid: str, pci: PciAddress | None, ordinal: int, visible: str | None, nvml: Sequence[tuple[str, PciAddress | None]]
) -> int | None:
    """Index into ``nvml`` (each GPU's UUID and PCI address, in NVML order) of the CUDA device
    with ``uuid``/``pci`` that is number ``ordinal`` among the ``visible`` (CUDA_VISIBLE_DEVICES)."""
    if uuid:
        for i, (u, _) in enumerate(nvml):
            if _uuid(u) == _uuid(uuid):
                return i
    if pci is not None:
        for i, (_, p) in enumerate(nvml):
            if p == pci:
                return i
    entries = [e.strip() for e in visible.split(",")] if visible else None
    if entries is not None:
        if ordinal >= len(entries):
            return None
        entry = entries[ordinal]
        if entry.isdigit():
            return int(entry) if int(entry) < len(nvml) else None
        found = [i for i, (u, _) in enumerate(nvml) if _uuid(u).startswith(_uuid(entry))]  # CUDA accepts UUID prefixes
        return found[0] if len(found) == 1 else None
    return ordinal if ordinal < len(nvml) else None


@lru_cache(maxsize=8)
def nvml_index(device: torch.device) -> int | None:
    """NVML's index of CUDA ``device`` (looked up once per process); None off CUDA or where NVML does not answer."""
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    ids: list[Any] = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]  # torch >= 2.5 has them
    pci = (int(ids[0]), int(ids[1]), int(ids[2])) if None not in ids else None
    try:
        nv = load_nvml()
    except MeterUnavailable:
        return None
    try:
        gpus = []
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid, bus = nv.nvmlDeviceGetUUID(h), nv.nvmlDeviceGetPciInfo(h).busId
            gpus.append(
                (
                    uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    parse_bus_id(bus.decode() if isinstance(bus, bytes) else str(bus)),
                )
            )
    finally:
        nv.nvmlShutdown()
    ordinal = device.index if device.index is not None else torch.cuda.current_device()
    return match_index(str(getattr(props, "uuid", "") or ""), pci, ordinal, os.environ.get("CUDA_VISIBLE_DEVICES"), gpus)
