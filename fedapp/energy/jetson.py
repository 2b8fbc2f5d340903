"""Jetson power rails read from the INA3221 / INA238 monitors in sysfs.

Three layouts exist across Jetson Linux releases (all found under ``sysfs_root``):

* JetPack >= 5 (Xavier, Orin), driver ``ina3221``: ``bus/i2c/drivers/ina3221/1-0040/hwmon/hwmonN``
  with ``inK_label`` (rail name), ``inK_input`` (mV) and ``currK_input`` (mA): P = V·I.
* INA238 (hwmon ``ina238``): ``powerK_input`` in µW.
* JetPack 4 (Nano), driver ``ina3221x``: ``bus/i2c/drivers/ina3221x/6-0040/iio:deviceN`` with
  ``rail_name_K`` and ``in_powerK_input`` (mW).

``class/hwmon/*`` entries named ina3221/ina238 are read too (deduplicated), for boards
whose driver sits elsewhere. By default the board-input rail is summed (VDD_IN on
Orin Nano / Xavier NX, POM_5V_IN on Nano); boards without one (AGX Orin) sum every
rail; ``energy-rails`` names the rails explicitly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fedapp.energy.base import MeterUnavailable, Sensor, read_number

TOTAL_RAILS = ("VDD_IN", "POM_5V_IN", "5V_IN")  # board input, where the board has one
SKIP_LABELS = {"NC", "sum of shunt voltages"}
HWMON_CHIPS = {"ina3221", "ina238"}


@dataclass(frozen=True)
class Rail:
    label: str
    path: Path  # power file, or voltage file when ``curr`` is set
    scale: float  # multiplies the power file (to W); unused for V·I
    curr: Path | None = None

    def watts(self) -> float:
        if self.curr is not None:
            return read_number(self.path) * read_number(self.curr) / 1e6  # mV · mA
        return read_number(self.path) * self.scale


def _label(d: Path, names: list[str], default: str) -> str:
    for n in names:
        if (d / n).is_file():
            return (d / n).read_text().strip()
    return default


def hwmon_rails(hw: Path, device: str) -> list[Rail]:
    chip = _label(hw, ["name"], "hwmon")
    ids = sorted({int(m.group(2)) for f in hw.iterdir() if (m := re.fullmatch(r"(in|curr|power)(\d+)_input", f.name))})
    rails = []
    for k in ids:
        default = f"{chip}@{device}" + (f":{k}" if k > 1 else "")
        label = _label(hw, [f"power{k}_label", f"in{k}_label", f"curr{k}_label"], default)
        if label in SKIP_LABELS:
            continue
        if (hw / f"power{k}_input").is_file():
            rails.append(Rail(label, hw / f"power{k}_input", 1e-6))
        elif (hw / f"in{k}_input").is_file() and (hw / f"curr{k}_input").is_file():
            rails.append(Rail(label, hw / f"in{k}_input", 1.0, hw / f"curr{k}_input"))
    return rails


def iio_rails(iio: Path) -> list[Rail]:
    rails = []
    for f in sorted(iio.glob("in_power*_input")):
        k = f.name[len("in_power") : -len("_input")]
        label = _label(iio, [f"rail_name_{k}"], f"{iio.parent.name}:{k}")
        if label not in SKIP_LABELS:
            rails.append(Rail(label, f, 1e-3))
    return rails


def find_rails(sysfs_root: str | Path = "/sys") -> list[Rail]:
    root = Path(sysfs_root)
    drivers = root / "bus" / "i2c" / "drivers"
    found: dict[Path, list[Rail]] = {}
    for hw in sorted(drivers.glob("ina3221/*-*/hwmon/hwmon*")) + sorted(drivers.glob("ina238/*-*/hwmon/hwmon*")):
        found.setdefault(hw.resolve(), hwmon_rails(hw, hw.parent.parent.name))
    for hw in sorted((root / "class" / "hwmon").glob("hwmon*")):
        if _label(hw, ["name"], "") in HWMON_CHIPS and hw.resolve() not in found:
            found[hw.resolve()] = hwmon_rails(hw, hw.name)
    for iio in sorted(drivers.glob("ina3221x/*-*/iio:device*")):
        found.setdefault(iio.resolve(), iio_rails(iio))
    return [r for rails in found.values() for r in rails]


def choose(available: list[str], wanted: list[str]) -> list[str]:
    """Rails to sum: the wanted ones this board has, else its input rail, else all."""
    by_upper = {a.upper(): a for a in available}
    mine = [by_upper[w.upper()] for w in wanted if w.upper() in by_upper]
    if mine:
        return mine
    total = [r for r in TOTAL_RAILS if r in available]
    return total[:1] if total else list(available)


class JetsonRails(Sensor):
    kind = "power"
    name = "jetson"

    def __init__(self, sysfs_root: str | Path = "/sys", rails: list[str] | None = None):
        found = find_rails(sysfs_root)
        if not found:
            raise MeterUnavailable(
                f"no INA3221/INA238 power rails under {sysfs_root}/bus/i2c/drivers/{{ina3221,ina238,ina3221x}} or {sysfs_root}/class/hwmon"
            )
        self.available = [r.label for r in found]
        chosen = choose(self.available, rails or [])
        self._rails = [r for r in found if r.label in chosen]
        try:
            self.read()
        except OSError as err:
            raise MeterUnavailable(f"Jetson power rail not readable: {err}") from None

    @property
    def rails(self) -> list[str]:
        return [r.label for r in self._rails]

    def read(self) -> float:
        return sum(r.watts() for r in self._rails)

    def describe(self) -> str:
        return f"jetson rails {'+'.join(self.rails)} (sysfs; available: {', '.join(self.available)})"
