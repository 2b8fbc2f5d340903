"""Tear down a fleet by its name prefix (``fa-<runner pid>-``): every process inside its
namespaces or cgroups (SIGTERM, then SIGKILL), the namespaces (and with them the veths and
qdiscs), the cgroups, and the work folder. The runner calls it on every exit; `fedapp fleet
clean` calls it after a runner was killed (SIGKILL leaves no chance to clean)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

from fedapp.fleet import cgroups, images, net

NAME = re.compile(r"^fa-(\d+)-")


def prefix_of(pid: int) -> str:
    return f"fa-{pid}-"


def work_dirs(prefix: str) -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"{prefix}*work"))


def pids_of(prefix: str) -> set[int]:
    """Every process inside fleet ``prefix``'s namespaces or cgroups."""
    return {p for ns in net.namespaces(prefix) for p in net.pids_in(ns)} | {p for g in cgroups.groups(prefix) for p in cgroups.procs(g)}


def leftovers(prefix: str) -> dict[str, list[str]]:
    """What of fleet ``prefix`` still exists (empty lists: nothing)."""
    return {
        "namespaces": net.namespaces(prefix), "cgroups": cgroups.groups(prefix),
        "processes": [str(p) for p in sorted(pids_of(prefix))], "work": [str(p) for p in work_dirs(prefix)],
        "containers": images.containers(prefix),
    }  # fmt: skip


def _kill(pids: set[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def clean(prefix: str) -> dict[str, list[str]]:
    """Remove everything of fleet ``prefix``; returns what was found before."""
    found = leftovers(prefix)
    pids = {int(p) for p in found["processes"]}
    _kill(pids, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = pids_of(prefix)
    _kill(pids, signal.SIGKILL)
    for _ in range(50):
        if not pids_of(prefix):
            break
        time.sleep(0.1)
    for ns in net.namespaces(prefix):
        net.delete(ns)
    for g in cgroups.groups(prefix):
        cgroups.remove(g)
    images.remove(prefix)  # after its processes: a working container's mount is busy while one runs in it
    for d in work_dirs(prefix):
        shutil.rmtree(d, ignore_errors=True)
    return found


def orphaned() -> list[str]:
    """Prefixes of fleets whose runner process is gone."""
    names = [*net.namespaces("fa-"), *cgroups.groups("fa-"), *(p.name for p in work_dirs("fa-")), *images.containers("fa-")]
    pids = {int(m[1]) for n in names if (m := NAME.match(n))}
    return [prefix_of(p) for p in sorted(pids) if not Path(f"/proc/{p}").exists()]
