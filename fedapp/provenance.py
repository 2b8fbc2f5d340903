"""What produced a run, kept in config.json under ``provenance``: start time, command, host,
Python and package versions, the git commit of the source (if any), and the device.

Under `flwr run` the ServerApp runs from the installed app bundle (no .git), so the commit is
read from the checkout whose ``scripts/flwr-env.sh`` started the SuperLink, and the bundle's
hash and the ``--run-config`` overrides are recorded beside it.
"""

from __future__ import annotations

import importlib.metadata
import platform
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fedapp.config import RunConfig
from fedapp.rundir import checkout_base

PACKAGES = ("fedapp", "flwr", "flwr-datasets", "torch", "torchvision", "numpy")


def device_info(cfg: RunConfig) -> str:
    """The device this run's server evaluates on (the clients' devices are in devices.json)."""
    from fedapp.device import describe, process_device

    return describe(process_device(cfg.device))


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state(root: Path) -> dict[str, Any] | None:
    """Commit and whether tracked files differ from it, or None outside a git checkout."""
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()), "source": str(root)}


def source_git() -> dict[str, Any] | None:
    here = Path(__file__).resolve().parents[1]
    found = git_state(here)
    base = checkout_base()
    return found if found is not None or base is None else git_state(base)


def collect(cfg: RunConfig, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": shlex.join(sys.argv),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "git": source_git(),
        "device": device_info(cfg),
        **(extra or {}),
    }
