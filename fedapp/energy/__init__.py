"""Time and energy accounting: meters (Jetson rails, tegrastats, RAPL, NVML, wall-plug CSV),
a background sampler, client phase windows and the server's per-round ledger (docs/energy.md)."""

from fedapp.energy.auto import MeterSettings, open_sensors, process_sampler
from fedapp.energy.base import MeterUnavailable, Sensor, integrate
from fedapp.energy.sampler import Sampler, Window

__all__ = ["MeterSettings", "MeterUnavailable", "Sampler", "Sensor", "Window", "integrate", "open_sensors", "process_sampler"]
