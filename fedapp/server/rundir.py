"""Run folders: where a run's results go, and the rules that keep runs apart.

* ``run-dir = ""`` (the default) names a new folder per run, ``runs/<UTC time>-<method>-<dataset>-<4 hex>``.
  A relative run-dir resolves against a base folder: the working directory in-process
  (``fedapp run``), and under ``flwr run`` the checkout whose ``scripts/flwr-env.sh`` started
  the SuperLink (``FEDAPP_CHECKOUT``, inherited by the ServerApp); never the SuperLink's cwd.
* Confined: no ``..`` component, nothing under /dev, /proc or /sys, never an existing non-folder.
* A folder that holds results is refused unless ``resume`` or ``overwrite``; ``overwrite``
  removes only fedapp's own result files, and only once the run has started (after discovery),
  so a failed start never touches an earlier run's files.
* One run per folder: an exclusive ``flock`` on ``<run-dir>/.lock`` for the run's lifetime,
  with the holder's pid, host and start time written in it for the refusal message. The
  kernel drops the lock when the holder dies, so a crash never leaves a lock that blocks.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from fedapp.core.config import ConfigError

CHECKOUT_ENV = "FEDAPP_CHECKOUT"
LOCK = ".lock"
FAILURE = "failure.json"
# what a run writes into its folder; rows in metrics.jsonl, a checkpoint or a model are results
# (a start that finished no round leaves only config.json, meters.json and no rows)
RESULTS = ("metrics.jsonl", "checkpoint.npz", "model.npz")
RUN_FILES = (*RESULTS, "config.json", "meters.json", "metrics-energy.jsonl", FAILURE, "run.log", "mlflow.json", "mlflow.db")
CLIENT_STATE = "client-state"  # the simulation's disk-stored client state: <run-dir>/client-state/<run token>
RUN_DIRS = (CLIENT_STATE,)
DEVICE_ROOTS = (Path("/dev"), Path("/proc"), Path("/sys"))


def bad(path: str | Path, why: str) -> ConfigError:
    return ConfigError(f"run-config key 'run-dir' = {str(path)!r}: {why}")


def auto_name(method: str, dataset: str) -> str:
    """``runs/<UTC time>-<method>-<dataset>-<4 hex>``: readable, and two runs started in the same
    second (parallel seeds, say) still get folders of their own."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"runs/{stamp}-{re.sub(r'[^A-Za-z0-9._-]+', '-', f'{method}-{dataset}')}-{secrets.token_hex(2)}"


def checkout_base() -> Path | None:
    """The checkout a `flwr run` ServerApp resolves relative run-dirs against (set by flwr-env.sh)."""
    root = os.environ.get(CHECKOUT_ENV, "")
    return Path(root) if root and Path(root).is_absolute() else None


def resolve(run_dir: str, method: str, dataset: str, base: Path | None) -> Path:
    """The absolute, confined run folder ``run_dir`` names (checked, not created)."""
    given = run_dir or auto_name(method, dataset)
    path = Path(given)
    if ".." in path.parts:
        raise bad(run_dir, "'..' is not allowed in a run folder")
    if not path.is_absolute():
        if base is None:
            what = "a relative run folder" if run_dir else "the default (a new folder under runs/)"
            raise bad(
                run_dir,
                f"{what} needs a base folder, and this SuperLink was not started from a checkout's scripts/flwr-env.sh "
                "(or `fedapp sim`): give an absolute path",
            )
        path = base / path
    real = Path(os.path.realpath(path))
    if any(real == root or root in real.parents for root in DEVICE_ROOTS):
        raise bad(run_dir, f"{real} is a system or device path, not a results folder")
    if real.exists() and not real.is_dir():
        raise bad(run_dir, f"{real} exists and is not a folder")
    return path


def holds_results(path: Path) -> list[str]:
    return [name for name in RESULTS if (path / name).exists() and (path / name).stat().st_size > 0]


def check_reuse(path: Path, resume: bool, overwrite: bool, has_checkpoint: bool) -> None:
    """Refuse to mix runs: results already in ``path`` need resume (with a checkpoint) or overwrite."""
    if resume and overwrite:
        raise ConfigError("run-config keys 'resume' and 'overwrite' are both true: choose one")
    found = holds_results(path)
    if not found or overwrite or (resume and has_checkpoint):
        return
    if resume:
        raise bad(path, f"resume=true, but it holds {', '.join(found)} and no checkpoint.npz to resume from; use overwrite=true")
    raise bad(path, f"it already holds results ({', '.join(found)}); set resume=true to continue that run, overwrite=true to replace it")


def clear(path: Path) -> None:
    """Remove an earlier run's result files (overwrite=true); anything else in the folder stays."""
    for name in RUN_FILES:
        with contextlib.suppress(FileNotFoundError):
            (path / name).unlink()
    for name in RUN_DIRS:
        shutil.rmtree(path / name, ignore_errors=True)


class RunLock:
    """An exclusive lock on one run folder, held from before discovery to the end of the run."""

    def __init__(self, folder: Path):
        self.folder, self.path = folder, folder / LOCK
        self.fd: int | None = None
        self.created = False

    def acquire(self) -> RunLock:
        try:
            if not self.folder.exists():
                with contextlib.suppress(FileExistsError):  # another start may create it at the same moment
                    self.folder.mkdir(parents=True)
                    self.created = True
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise bad(self.folder, f"another run is using it ({self.holder()}); wait for it or choose another run-dir") from None
                if os.path.exists(self.path) and os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break  # still the file at that path (a releasing holder may have just removed it)
                os.close(fd)
            me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(me).encode())
        except OSError as err:
            raise bad(self.folder, f"cannot write there ({err.strerror or err})") from None
        self.fd = fd
        return self

    def holder(self) -> str:
        try:
            info: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return f"lock file {self.path}"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
        return f"pid {info.get('pid')} on {info.get('host')} since {since}"

    def release(self, remove_if_empty: bool = False) -> None:
        """Drop the lock; ``remove_if_empty``: also the folder, if this run created it and left nothing."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = None
        if remove_if_empty and self.created:
            with contextlib.suppress(OSError):
                self.folder.rmdir()


def record_failure(path: Path, reason: str, stage: str) -> None:
    """``failure.json``: why the run holding this folder's lock failed (read by `fedapp sim`)."""
    info = {"reason": reason, "stage": stage, "time": time.time(), "pid": os.getpid(), "host": socket.gethostname()}
    with contextlib.suppress(OSError):
        (path / FAILURE).write_text(json.dumps(info, indent=2) + "\n")


def read_failure(path: Path, since: float = 0.0) -> str | None:
    """The reason recorded in ``failure.json`` at or after ``since`` (a Unix time), if any."""
    try:
        info = json.loads((path / FAILURE).read_text())
    except (OSError, ValueError):
        return None
    return str(info.get("reason")) if float(info.get("time", 0)) >= since else None
