"""What produced a run, kept in config.json under ``provenance``: start time, command, host,
Python and package versions, the git commit of the source with whether the tree was dirty (and a
digest of the diff), the device and thread settings, and each node's versions and data digest.

``command`` is what the user ran, credentials redacted (fedapp.server.redact): the command line of
`fedapp run` and the like. Under `flwr run` the ServerApp process was started by the SuperLink
(`flwr-serverapp`/`flwr-simulation ... --token ...`), so the command is the `flwr run` with
the run's ``--run-config`` overrides; the app path and connection are not visible to the
ServerApp (the bundle's hash and the Flower run id identify them).

The commit: fedapp imported from a checkout (``fedapp run``, an editable install) records that
checkout's. Under `flwr run` the ServerApp runs from the installed app bundle (FAB), which has no
.git: the commit is then read from the checkout ``FEDAPP_CHECKOUT`` names (``scripts/flwr-env.sh``,
``fedapp sim``), and only where that checkout's ``fedapp/`` files are, byte for byte, the code that
is running (``code_digest``); otherwise ``git`` is null and ``git-unknown`` says why.
"""

from __future__ import annotations

import hashlib
import os
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
from fedapp.core.versions import PACKAGES, node_versions, package_versions
from fedapp.server.redact import redact_argv
from fedapp.server.rundir import checkout_base

__all__ = ["PACKAGES", "collect", "git_state", "package_versions", "source_git"]

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the fedapp package that is running
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def device_info(cfg: RunConfig) -> str:
    """The device this run's server evaluates on (the clients' devices are in devices.json)."""
    from fedapp.core.device import describe, process_device

    return describe(process_device(cfg.device))


def thread_settings(cfg: RunConfig) -> dict[str, Any]:
    """The server process's thread settings as in force (set from ``num-threads`` before this is read)."""
    import torch

    return {
        "num-threads": cfg.num_threads,
        "deterministic": cfg.deterministic,
        "torch-threads": torch.get_num_threads(),
        "torch-interop-threads": torch.get_num_interop_threads(),
        **{var: os.environ.get(var) for var in THREAD_VARS},
    }


def git(root: Path, *args: str) -> bytes | None:
    """``git -C root ARGS`` output, None on any failure (no git, not a repository); takes no index lock."""
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(root: Path) -> dict[str, Any] | None:
    """Commit, whether the working tree differs from it (``dirty``: a tracked file changed, or an
    untracked file that .gitignore does not hide) and the sha256 of that difference (``git diff HEAD
    --binary``, then each such untracked file's path and contents), or None outside a git checkout."""
    if not (root / ".git").exists():
        return None
    head = git(root, "rev-parse", "HEAD")
    diff = git(root, "diff", "HEAD", "--binary", "--no-ext-diff", "--no-color")
    untracked = git(root, "ls-files", "--others", "--exclude-standard", "-z")
    if head is None or diff is None or untracked is None:
        return None
    h = hashlib.sha256(diff)
    for name in sorted(n for n in untracked.decode(errors="surrogateescape").split("\0") if n):
        path = root / name
        h.update(f"\0untracked {name}\0".encode(errors="surrogateescape"))
        h.update(path.read_bytes() if path.is_file() else b"")
    dirty = bool(diff or untracked)
    return {"commit": head.decode().strip(), "dirty": dirty, "diff-sha256": h.hexdigest() if dirty else None, "source": str(root)}


def code_digest(package: Path) -> str:
    """sha256 over the package's .py files (relative path and contents, in path order): equal for a
    checkout's ``fedapp/`` and the FAB built from it."""
    h = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts):
        h.update(f"{path.relative_to(package).as_posix()}\0{len(path.read_bytes())}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def source(package: Path = PACKAGE_DIR) -> tuple[dict[str, Any] | None, str]:
    """The git state of the code that is running and how it was found, or (None, why not)."""
    found = git_state(package.parent)
    if found is not None:
        return found, "the checkout fedapp was imported from"
    base = checkout_base()
    if base is None:
        return None, f"fedapp ran from {package.parent}, not a git checkout, and FEDAPP_CHECKOUT is not set"
    if not (base / "fedapp").is_dir():
        return None, f"fedapp ran from {package.parent} (no .git), and {base} (FEDAPP_CHECKOUT) holds no fedapp/ folder here"
    if code_digest(base / "fedapp") != code_digest(package):
        return None, f"fedapp ran from {package.parent} (no .git), and its code differs from the checkout {base} (FEDAPP_CHECKOUT)"
    found = git_state(base)
    if found is None:
        return None, f"fedapp ran from {package.parent}; its code equals {base} (FEDAPP_CHECKOUT), which is not a git checkout"
    return found, "FEDAPP_CHECKOUT, whose fedapp/ files equal the code that ran (from the app bundle)"


def source_git() -> dict[str, Any] | None:
    """The git state of the running code (see the module's docstring), or None where it cannot be known."""
    found, how = source()
    return None if found is None else {**found, "how": how}


def node_records(info: dict[int, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per partition: the node's versions (discovery) and the digest of its data as loaded (fedapp.server.node_data)."""
    return {str(pid): {"versions": node_versions(f), "data-sha256": f.get("data-sha256")} for pid, f in sorted(info.items())}


FLOWER_PROCESSES = ("flwr-serverapp", "flwr-simulation")  # what the SuperLink starts for `flwr run`


def user_command(argv: list[str], overrides: dict[str, Any] | None) -> str:
    """What the user ran, credentials redacted: under `flwr run` (``argv`` of a Flower process)
    the `flwr run` with its ``--run-config`` overrides, else ``argv`` itself."""
    if not argv or Path(argv[0]).name not in FLOWER_PROCESSES:
        return shlex.join(redact_argv(argv))
    given = " ".join(f"{k}={toml_value(v)}" for k, v in (overrides or {}).items())
    return shlex.join(redact_argv(["flwr", "run", *(["--run-config", given] if given else [])]))


def collect(cfg: RunConfig, extra: dict[str, Any] | None = None, nodes: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The record; ``nodes``: partition id -> the facts its node reported (fedapp.server.roster)."""
    found = source_git()
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": user_command(sys.argv, (extra or {}).get("run-config-overrides")),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "git": found,
        **({} if found else {"git-unknown": source()[1]}),
        "device": device_info(cfg),
        "threads": thread_settings(cfg),
        **({"nodes": node_records(nodes)} if nodes is not None else {}),
        **(extra or {}),
    }
