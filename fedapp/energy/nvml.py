"""NVIDIA GPU energy through NVML (the ``nvidia-ml-py`` package, module ``pynvml``).

Why NVML directly and not Zeus: Zeus itself reads these same NVML calls, and adds a
dependency tree (pydantic, ...) and its own measurement-window API we do not need;
nvidia-ml-py is NVIDIA's 60 kB binding with no dependencies. Volta and newer GPUs
have a total-energy counter (mJ), read exactly; older ones only report power (mW),
which the sampler integrates. ``energy-rails`` may name GPU indices ("0,1"); the
default is every GPU. NVML sees the GPU only, not the CPU or the board. Under MIG (a GPU cut
into instances) NVML has no per-instance energy or power: the meter reads the whole GPU, other
instances' work included, and says so in its description (meters.json, the run's log line).
"""

from __future__ import annotations

import contextlib
from typing import Any

from fedapp.energy.base import MeterUnavailable, Sensor


def load_nvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise MeterUnavailable("the nvml meter needs the nvidia-ml-py package (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise MeterUnavailable(f"NVML did not start ({err}): no NVIDIA driver (libnvidia-ml.so) on this machine") from None
    return pynvml


class Nvml(Sensor):
    name = "nvml"

    def __init__(self, rails: list[str] | None = None, mode: str = "auto"):
        """``mode``: "auto" (energy counter where every chosen GPU has one), "energy" or "power"."""
        self.nv = load_nvml()
        count = int(self.nv.nvmlDeviceGetCount())
        if count == 0:
            raise MeterUnavailable("NVML found no GPU")
        self.available = [str(i) for i in range(count)]
        self._ids = [int(r) for r in (rails or []) if r in self.available] or list(range(count))
        self._handles = [self.nv.nvmlDeviceGetHandleByIndex(i) for i in self._ids]
        self.kind = "power"
        if mode != "power":
            try:
                for h in self._handles:
                    self.nv.nvmlDeviceGetTotalEnergyConsumption(h)
                self.kind = "energy"
            except self.nv.NVMLError:
                if mode == "energy":
                    raise MeterUnavailable("this GPU has no NVML total-energy counter (Volta or newer needed)") from None

        self.mig = [i for i, h in zip(self._ids, self._handles, strict=True) if mig_enabled(self.nv, h)]

    @property
    def rails(self) -> list[str]:
        return [str(i) for i in self._ids]

    def read(self) -> float:
        if self.kind == "energy":
            return sum(float(self.nv.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles) / 1e3  # mJ -> J
        return sum(float(self.nv.nvmlDeviceGetPowerUsage(h)) for h in self._handles) / 1e3  # mW -> W

    def describe(self) -> str:
        how = "total-energy counter" if self.kind == "energy" else "power readings"
        mig = f"; MIG on for GPU {'+'.join(map(str, self.mig))}: NVML cannot meter one instance, this is the whole GPU" if self.mig else ""
        return f"nvml GPU {'+'.join(self.rails)} ({how}; available: {', '.join(self.available)}{mig})"

    def close(self) -> None:
        with contextlib.suppress(self.nv.NVMLError):
            self.nv.nvmlShutdown()


def mig_enabled(nv: Any, handle: Any) -> bool:
    """Whether MIG is on for this GPU now (False where the GPU or driver has no MIG)."""
    try:
        current, _pending = nv.nvmlDeviceGetMigMode(handle)
    except (nv.NVMLError, AttributeError):
        return False
    return bool(current == getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1))
