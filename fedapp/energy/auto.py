"""Pick and open the meters named by ``energy-meter`` (one sampler per process).

``auto`` takes a Jetson's board rails when it has them (sysfs, else tegrastats),
otherwise every one of NVML and RAPL that answers (summed: GPU + CPU package/DRAM),
and says what it picked; finding nothing is fine (time only). NVML meters the GPU the
process trains on (its NVML index, fedapp.energy.gpu_index), and ``auto`` leaves NVML
out where training runs on the CPU (an idle GPU's draw is not training energy); a GPU
metered by name while training runs elsewhere is said once in the log. A meter named
explicitly must exist: otherwise a ConfigError names the key, the value and what
was looked for. ``external`` measures nothing live: the wall-plug CSV is joined
after the run (``fedapp energy join``). Which meter comes from the run-config; the
commands and paths it opens come from the node only (fedapp/energy/node_settings.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedapp.core.config import ConfigError, RunConfig
from fedapp.energy.base import MeterUnavailable, Sensor, split_rails
from fedapp.energy.jetson import JetsonRails
from fedapp.energy.node_settings import node_setting
from fedapp.energy.nvml import Nvml
from fedapp.energy.rapl import Rapl
from fedapp.energy.sampler import Sampler
from fedapp.energy.tegrastats import Tegrastats

if TYPE_CHECKING:
    import torch

log = logging.getLogger("flwr")


@dataclass(frozen=True)
class MeterSettings:
    meter: str = "auto"
    interval: float = 0.1
    rails: str = ""
    sysfs_root: str = "/sys"
    tegrastats: str = "tegrastats"
    trains_on: str = "cpu"  # the torch device type training runs on
    gpu: int | None = None  # NVML index of the training GPU (None: not on an NVIDIA GPU, or unknown)

    @classmethod
    def of(cls, cfg: RunConfig, node_config: Mapping[str, Any], device: torch.device | None = None) -> MeterSettings:
        """Meter, interval and rails from the run; the sysfs root and tegrastats command from the node;
        NVML's GPU from the device this process trains on."""
        sysfs, tegrastats = node_setting("energy-sysfs-root", node_config), node_setting("energy-tegrastats", node_config)
        trains_on, gpu = "cpu", None
        if device is not None:
            from fedapp.energy.gpu_index import nvml_index

            trains_on, gpu = device.type, nvml_index(device)
        return cls(cfg.energy_meter, cfg.energy_interval, cfg.energy_rails, sysfs, tegrastats, trains_on, gpu)


def open_backend(name: str, s: MeterSettings) -> Sensor:
    rails = split_rails(s.rails)
    if name == "rapl":
        return Rapl(s.sysfs_root, rails)
    if name == "nvml":
        return Nvml(rails or ([str(s.gpu)] if s.gpu is not None else []))
    try:
        return JetsonRails(s.sysfs_root, rails)
    except MeterUnavailable as sysfs_err:
        try:
            return Tegrastats(s.tegrastats, rails, s.interval)
        except MeterUnavailable as err:
            raise MeterUnavailable(f"{sysfs_err}; and {err}") from None


def open_sensors(s: MeterSettings) -> tuple[list[Sensor], str]:
    """The sensors to sample and a sentence saying what was chosen (or looked for)."""
    if s.meter in ("none", "external"):
        why = "time only" if s.meter == "none" else "time only; join the wall-plug CSV after the run with `fedapp energy join`"
        return [], f"energy-meter={s.meter}: {why}"
    if s.meter == "auto":
        sensors, misses = [], []
        if s.trains_on != "cuda":
            misses.append(f"nvml: not used, training runs on {s.trains_on}")
        for names in (["jetson"], ["nvml", "rapl"] if s.trains_on == "cuda" else ["rapl"]):
            for name in names:
                try:
                    sensors.append(open_backend(name, s))
                except MeterUnavailable as err:
                    misses.append(f"{name}: {err}")
            if sensors:
                break
        if not sensors:
            return [], "energy-meter=auto: no meter on this device, recording time only (looked for " + "; ".join(misses) + ")"
    else:
        sensors = []
        for name in s.meter.split("+"):
            try:
                sensors.append(open_backend(name, s))
            except MeterUnavailable as err:
                for done in sensors:
                    done.close()
                raise MeterUnavailable(f"run-config key 'energy-meter' = {s.meter!r}: {name} meter unavailable: {err}") from None
    check_rails(s, sensors)
    text = f"energy-meter={s.meter}: " + " + ".join(x.describe() for x in sensors)
    if s.trains_on != "cuda" and any(x.name == "nvml" for x in sensors):
        text += f"; note: a GPU is metered while training runs on {s.trains_on}"
    return sensors, text


def check_rails(s: MeterSettings, sensors: list[Sensor]) -> None:
    unknown = [r for r in split_rails(s.rails) if not any(x.accepts(r) for x in sensors)]
    if unknown:
        for x in sensors:
            x.close()
        have = "; ".join(f"{x.name}: {', '.join(getattr(x, 'available', x.rails))}" for x in sensors) or "no meter"
        raise ConfigError(f"run-config key 'energy-rails' = {s.rails!r}: {', '.join(unknown)} not found; available: {have}")


_lock = threading.Lock()
_samplers: dict[MeterSettings, tuple[Sampler | None, str]] = {}


def process_sampler(s: MeterSettings) -> tuple[Sampler | None, str]:
    """This process's sampler for ``s`` (started once, then shared by every client it serves)."""
    with _lock:
        if s not in _samplers:
            sensors, text = open_sensors(s)
            _samplers[s] = (Sampler(sensors, s.interval) if sensors else None, text)
            log.debug("%s", text)  # the server prints one line for all clients (fedapp.core.logs.meters_line)
        return _samplers[s]


def close_samplers() -> None:
    """Stop every sampler of this process (tests, benchmarks; exit does it anyway)."""
    with _lock:
        for sampler, _ in _samplers.values():
            if sampler is not None:
                sampler.close()
        _samplers.clear()
