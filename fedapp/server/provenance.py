"""What produced a run, kept in config.json under ``provenance``: start time, command, host,
Python and package versions, the git commit of the source (if any), and the device.

``command`` is what the user ran, credentials redacted (fedapp.server.redact): the command line of
`fedapp run` and the like. Under `flwr run` the ServerApp process was started by the SuperLink
(`flwr-serverapp`/`flwr-simulation ... --token ...`), so the command is the `flwr run` with
the run's ``--run-config`` overrides; the app path and connection are not visible to the
ServerApp (the bundle's hash and the Flower run id identify them). The commit is read from
the checkout whose ``scripts/flwr-env.sh`` started the SuperLink (the bundle has no .git).
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

from fedapp.core.config import RunConfig
from fedapp.core.toml_text import toml_value
from fedapp.server.redact import redact_argv
from fedapp.server.rundir import checkout_base

PACKAGES = ("fedapp", "flwr", "flwr-datasets", "torch", "torchvision", "numpy")


def device_info(cfg: RunConfig) -> str:
    """The device this run's server evaluates on (the clients' devices are in devices.json)."""
    from fedapp.core.device import describe, process_device

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


FLOWER_PROCESSES = ("flwr-serverapp", "flwr-simulation")  # what the SuperLink starts for `flwr run`


def user_command(argv: list[str], overrides: dict[str, Any] | None) -> str:
    """What the user ran, credentials redacted: under `flwr run` (``argv`` of a Flower process)
    the `flwr run` with its ``--run-config`` overrides, else ``argv`` itself."""
    if not argv or Path(argv[0]).name not in FLOWER_PROCESSES:
        return shlex.join(redact_argv(argv))
    given = " ".join(f"{k}={toml_value(v)}" for k, v in (overrides or {}).items())
    return shlex.join(redact_argv(["flwr", "run", *(["--run-config", given] if given else [])]))


def collect(cfg: RunConfig, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": user_command(sys.argv, (extra or {}).get("run-config-overrides")),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "git": source_git(),
        "device": device_info(cfg),
        **(extra or {}),
    }
