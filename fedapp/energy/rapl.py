"""Intel/AMD RAPL energy counters through Linux powercap (package and DRAM).

Each zone ``class/powercap/intel-rapl:S[:D]`` has ``name`` (package-0, dram, core,
uncore, psys), ``energy_uj`` (a counter that wraps to 0 after ``max_energy_range_uj``)
and is read without a kernel module of ours. The default sums every ``package-*``
and ``dram`` zone (``core``/``uncore`` lie inside the package; ``psys`` would count
it twice). The counter must be read at least once per wrap period (minutes at full
load), which the background sampler does. Since Linux 5.10 ``energy_uj`` is readable
by root only (CVE-2020-8694); the error says so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from fedapp.energy.base import MeterUnavailable, Sensor, read_number

DEFAULT_DOMAINS = ("package", "dram")


@dataclass
class Zone:
    label: str  # e.g. "package-0" or "package-0/dram"
    name: str  # the zone's own name: package-0, dram, ...
    path: Path
    max_uj: float
    last_uj: float | None = None
    total_j: float = field(default=0.0)

    def advance(self) -> float:
        """Read the counter; add the increase since the last read, handling one wrap."""
        raw = read_number(self.path / "energy_uj")
        if self.last_uj is not None:
            delta = raw - self.last_uj
            if delta < 0:  # wrapped past max_energy_range_uj back to 0
                delta += self.max_uj
            self.total_j += delta / 1e6
        self.last_uj = raw
        return self.total_j


def find_zones(sysfs_root: str | Path = "/sys") -> list[Zone]:
    base = Path(sysfs_root) / "class" / "powercap"
    zones = []
    for d in sorted(base.glob("intel-rapl:*")):  # intel-rapl-mmio duplicates the package counter: left out
        if not (d / "name").is_file():
            continue
        name = (d / "name").read_text().strip()
        parts = d.name.split(":")
        parent = base / ":".join(parts[:2])
        label = name if len(parts) == 2 else f"{(parent / 'name').read_text().strip() if (parent / 'name').is_file() else parts[1]}/{name}"
        max_uj = read_number(d / "max_energy_range_uj") if (d / "max_energy_range_uj").is_file() else 2.0**32
        zones.append(Zone(label, name, d, max_uj))
    return zones


def matches(zone: Zone, wanted: list[str]) -> bool:
    return any(w == zone.label or w == zone.name or zone.name.startswith(f"{w}-") for w in wanted)


class Rapl(Sensor):
    kind = "energy"
    name = "rapl"

    def __init__(self, sysfs_root: str | Path = "/sys", rails: list[str] | None = None):
        zones = find_zones(sysfs_root)
        if not zones:
            raise MeterUnavailable(f"no RAPL zones under {sysfs_root}/class/powercap/intel-rapl:* (powercap not present)")
        self.available = [z.label for z in zones]
        mine = [z for z in zones if matches(z, rails or [])]
        self._zones = mine or [z for z in zones if matches(z, list(DEFAULT_DOMAINS))]
        if not self._zones:
            raise MeterUnavailable(f"no package or dram RAPL zone among {', '.join(self.available)}")
        self._lock = threading.Lock()
        try:
            self.read()
        except PermissionError as err:
            raise MeterUnavailable(
                f"RAPL counter not readable ({err}); since Linux 5.10 energy_uj is root-only: run as root or "
                f"`sudo chmod a+r {sysfs_root}/class/powercap/intel-rapl:*/energy_uj`"
            ) from None

    @property
    def rails(self) -> list[str]:
        return [z.label for z in self._zones]

    def mark(self, last: float) -> list[float]:
        return [z.last_uj if z.last_uj is not None else -1.0 for z in self._zones]

    def since(self, prev: list[float], nxt: list[float], dt: float) -> float | None:
        if len(prev) != len(self._zones) or len(nxt) != len(prev) or min(prev + nxt) < 0:
            return None
        return sum((n - p if n >= p else n - p + z.max_uj) for p, n, z in zip(prev, nxt, self._zones, strict=True)) / 1e6

    def accepts(self, entry: str) -> bool:
        return any(matches(z, [entry]) for z in self._zones)

    def read(self) -> float:
        with self._lock:  # the sampler thread and window marks both read
            return sum(z.advance() for z in self._zones)

    def describe(self) -> str:
        return f"rapl {'+'.join(self.rails)} (powercap; available: {', '.join(self.available)})"
