"""One cgroup v1 group per node, named like its namespace, in three hierarchies: ``cpu``
(cfs quota = the class's CPU share of one core), ``memory`` (the class's limit, where given)
and ``cpuacct`` (the CPU seconds the power model turns into modelled joules). A process
joins all three before it execs (``join``), so every ClientApp its SuperNode spawns is
inside too."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fedapp.fleet import FleetError

ROOT = Path("/sys/fs/cgroup")
HIERARCHIES = ("cpu", "cpuacct", "memory")
PERIOD_US = 100_000


def unavailable() -> str | None:
    """Why cgroup v1 cpu/cpuacct/memory cannot be used here, or None."""
    missing = [h for h in HIERARCHIES if not (ROOT / h / "cgroup.procs").exists()]
    return f"cgroup v1 hierarchies {', '.join(missing)} are not mounted under {ROOT}" if missing else None


def path(hierarchy: str, name: str) -> Path:
    return ROOT / hierarchy / name


def create(name: str, cpu_share: float, memory_mb: int | None) -> None:
    for h in HIERARCHIES:
        path(h, name).mkdir()
    (path("cpu", name) / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (path("cpu", name) / "cpu.cfs_quota_us").write_text(str(round(cpu_share * PERIOD_US)))
    if memory_mb is not None:
        (path("memory", name) / "memory.limit_in_bytes").write_text(str(memory_mb << 20))


def limits(name: str) -> dict[str, int]:
    """What the kernel holds for the group (read back, not what was asked)."""
    cpu, mem = path("cpu", name), path("memory", name)
    return {
        "cfs_period_us": int((cpu / "cpu.cfs_period_us").read_text()), "cfs_quota_us": int((cpu / "cpu.cfs_quota_us").read_text()),
        "memory_limit_bytes": int((mem / "memory.limit_in_bytes").read_text()),
    }  # fmt: skip


def cpu_seconds(name: str) -> float:
    return int((path("cpuacct", name) / "cpuacct.usage").read_text()) / 1e9


def throttled_seconds(name: str) -> float:
    """Time the group's CPU quota held it back (cpu.stat throttled_time): zero when something
    else (the machine's other work) was the tighter limit."""
    stat = dict(line.split() for line in (path("cpu", name) / "cpu.stat").read_text().splitlines())
    return int(stat["throttled_time"]) / 1e9


def join(name: str) -> None:
    """Move the calling process into the group (a Popen preexec_fn: runs in the child before exec)."""
    for h in HIERARCHIES:
        (path(h, name) / "cgroup.procs").write_text(str(os.getpid()))


def groups(prefix: str) -> list[str]:
    found = {p.name for h in HIERARCHIES if (ROOT / h).is_dir() for p in (ROOT / h).iterdir() if p.is_dir() and p.name.startswith(prefix)}
    return sorted(found)


def procs(name: str) -> list[int]:
    out: set[int] = set()
    for h in HIERARCHIES:
        f = path(h, name) / "cgroup.procs"
        if f.exists():
            out |= {int(p) for p in f.read_text().split()}
    return sorted(out)


def remove(name: str, timeout: float = 10.0) -> None:
    """rmdir the group in every hierarchy once it is empty (the caller has killed its processes)."""
    deadline = time.monotonic() + timeout
    for h in HIERARCHIES:
        p = path(h, name)
        while p.exists():
            try:
                p.rmdir()
            except OSError as err:
                if time.monotonic() > deadline:
                    raise FleetError(f"cannot remove cgroup {p}: {err}") from None
                time.sleep(0.1)
