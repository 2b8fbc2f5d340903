"""A fleet profile (TOML): named device classes, each with a node count, a CPU share, uplink
and downlink rates, an optional memory limit, a FedSPU active fraction and a power model.

Every value is checked before anything is created; an error names the class, the key and
the value. Example: configs/fleet/jetson-mix.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedapp.fleet import FleetError

KEYS = ("count", "cpu-share", "uplink-mbit", "downlink-mbit", "memory-mb", "active-fraction", "idle-watts", "busy-watts")
REQUIRED = ("count", "cpu-share", "uplink-mbit", "downlink-mbit", "idle-watts", "busy-watts")


@dataclass(frozen=True)
class DeviceClass:
    name: str
    count: int
    cpu_share: float  # fraction of one core (cgroup cpu.cfs_quota_us / cpu.cfs_period_us)
    uplink_mbit: float  # node -> SuperLink
    downlink_mbit: float  # SuperLink -> node
    memory_mb: int | None  # cgroup memory.limit_in_bytes; None: no limit
    active_fraction: float | None  # node-config active-fraction (FedSPU/FjORD/FedDrop tier); None: not sent
    idle_watts: float  # modelled power at rest
    busy_watts: float  # modelled power with its whole CPU share busy


@dataclass(frozen=True)
class Profile:
    name: str
    classes: tuple[DeviceClass, ...]

    def nodes(self) -> list[DeviceClass]:
        """The class of each node, node i = partition i, classes in profile order."""
        return [c for c in self.classes for _ in range(c.count)]


def _number(cls: str, key: str, v: Any, lo: float, hi: float, lo_open: bool = True) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        bound = f"({lo:g}, {hi:g}]" if lo_open else f"[{lo:g}, {hi:g}]"
        raise FleetError(f"fleet profile: class {cls!r} {key} = {v!r}: expected a number in {bound}")
    return float(v)


def parse_class(name: str, table: Any) -> DeviceClass:
    if not isinstance(table, dict):
        raise FleetError(f"fleet profile: class {name!r} must be a table ([class.{name}]), got {table!r}")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise FleetError(f"fleet profile: class {name!r} has unknown key(s) {', '.join(unknown)}; known: {', '.join(KEYS)}")
    missing = [k for k in REQUIRED if k not in table]
    if missing:
        raise FleetError(f"fleet profile: class {name!r} lacks {', '.join(missing)}")
    count = table["count"]
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 64:
        raise FleetError(f"fleet profile: class {name!r} count = {count!r}: expected an integer in [1, 64]")
    mem = table.get("memory-mb")
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int) or not 64 <= mem <= 1 << 20):
        raise FleetError(f"fleet profile: class {name!r} memory-mb = {mem!r}: expected an integer of at least 64")
    frac = table.get("active-fraction")
    idle = _number(name, "idle-watts", table["idle-watts"], 0, 1e4, lo_open=False)
    busy = _number(name, "busy-watts", table["busy-watts"], 0, 1e4, lo_open=False)
    if busy < idle:
        raise FleetError(f"fleet profile: class {name!r} busy-watts = {busy:g} is below idle-watts = {idle:g}")
    return DeviceClass(
        name=name, count=count,
        cpu_share=_number(name, "cpu-share", table["cpu-share"], 0.01, 64, lo_open=False),
        uplink_mbit=_number(name, "uplink-mbit", table["uplink-mbit"], 0, 10_000),
        downlink_mbit=_number(name, "downlink-mbit", table["downlink-mbit"], 0, 10_000),
        memory_mb=mem,
        active_fraction=None if frac is None else _number(name, "active-fraction", frac, 0, 1),
        idle_watts=idle, busy_watts=busy,
    )  # fmt: skip


def parse_profile(data: dict[str, Any], name: str = "fleet") -> Profile:
    unknown = sorted(set(data) - {"name", "class"})
    if unknown:
        raise FleetError(f"fleet profile: unknown top-level key(s) {', '.join(unknown)}; known: name, class")
    classes = data.get("class")
    if not isinstance(classes, dict) or not classes:
        raise FleetError("fleet profile: no device classes: add at least one [class.NAME] table")
    for cname in classes:
        if not cname.replace("-", "").replace("_", "").isalnum():
            raise FleetError(f"fleet profile: class name {cname!r}: use letters, digits, - and _")
    return Profile(name=str(data.get("name", name)), classes=tuple(parse_class(k, v) for k, v in classes.items()))


def load_profile(path: str | Path) -> Profile:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise FleetError(f"fleet profile {p} does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise FleetError(f"fleet profile {p}: not valid TOML: {err}") from None
    return parse_profile(data, p.stem)
