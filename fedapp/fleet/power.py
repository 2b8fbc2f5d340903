"""Modelled energy of an emulated device: P = idle + (busy - idle) * utilisation, where
utilisation is the node's measured CPU seconds over what its CPU share allows in the
interval. So E = idle * wall + (busy - idle) * cpu_seconds / cpu_share. These joules are a
*model* of the device the class stands for, computed from this machine's CPU accounting;
they are recorded as ``modelled_joules`` and never mixed with metered joules (fedapp.energy)."""

from __future__ import annotations

from fedapp.fleet.profile import DeviceClass


def modelled_joules(cls: DeviceClass, wall_seconds: float, cpu_seconds: float) -> float:
    busy_fraction = min(1.0, cpu_seconds / (cls.cpu_share * wall_seconds)) if wall_seconds > 0 else 0.0
    return (cls.idle_watts + (cls.busy_watts - cls.idle_watts) * busy_fraction) * wall_seconds
