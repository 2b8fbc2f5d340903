"""Per-client state that outlives a round (scores, masks, personal parameters, flags).

Two stores with one interface, keyed by partition id:

* ``ContextStore`` keeps arrays in Flower's ``Context.state`` (per run, per node;
  shipped with every message in deployment, lost when a SuperNode restarts).
* ``DiskStore`` writes one ``.npz`` per client under a folder (the run folder in
  simulation, the node's ``state-dir`` in deployment), atomically, so state survives
  restarts and memory does not grow with thousands of simulated clients.

A state file that cannot be read (a disk error, a file written by something else) fails
that round's message with an error naming it, and is moved aside to ``<name>.corrupt`` so
the client starts afresh the next round, as after a lost state-dir (every method already
handles that). Failing the round puts the file's name in the server's failure_reasons, where
the operator sees it; keeping it failing would lose the client for the rest of the run.
The run token that names a run's state folder comes from the server and is checked before
it becomes a path.
"""

from __future__ import annotations

import os
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Protocol

import numpy as np
from flwr.app import ArrayRecord, Context

from fedapp.wire import from_record, to_record

TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # checkpoint.new_token's alphabet, one path component


class StateError(RuntimeError):
    """A client's stored state cannot be used (the message names the file)."""


def token_folder(root: str | Path, token: str) -> Path:
    """``root / token`` for a run token the server sent: one plain path component, never '..' or absolute."""
    if not TOKEN.fullmatch(token) or token in (".", ".."):
        raise ValueError(
            f"run-token {token[:80]!r} from the server is not allowed: expected letters, digits, '.', '_' or '-' (at most 200)"
        )
    return Path(root) / token


class StateStore(Protocol):
    def load(self, pid: int) -> dict[str, np.ndarray]: ...

    def save(self, pid: int, arrays: dict[str, np.ndarray]) -> None: ...


class MemoryStore:
    """Plain dict store (in-process engine and tests)."""

    def __init__(self) -> None:
        self._data: dict[int, dict[str, np.ndarray]] = {}

    def load(self, pid: int) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self._data.get(pid, {}).items()}

    def save(self, pid: int, arrays: dict[str, np.ndarray]) -> None:
        self._data[pid] = {k: np.array(v, copy=True) for k, v in arrays.items()}


class ContextStore:
    """Arrays kept in ``context.state`` under one ArrayRecord per partition."""

    def __init__(self, context: Context) -> None:
        self.context = context

    def load(self, pid: int) -> dict[str, np.ndarray]:
        rec = self.context.state.array_records.get(f"fedapp-{pid}")
        return from_record(rec) if rec is not None else {}

    def save(self, pid: int, arrays: dict[str, np.ndarray]) -> None:
        self.context.state[f"fedapp-{pid}"] = to_record(arrays) if arrays else ArrayRecord()


class DiskStore:
    """One compressed-free ``.npz`` per client, replaced atomically on save."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, pid: int) -> Path:
        return self.root / f"client-{pid}.npz"

    def load(self, pid: int) -> dict[str, np.ndarray]:
        p = self.path(pid)
        if not p.exists():
            return {}
        try:
            with np.load(p, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            aside = p.with_name(p.name + ".corrupt")
            os.replace(p, aside)
            raise StateError(
                f"client state file {p} is unreadable ({type(err).__name__}: {err}); moved to {aside.name}, "
                "the client starts afresh next round"
            ) from None

    def save(self, pid: int, arrays: dict[str, np.ndarray]) -> None:
        save_npz_atomic(self.path(pid), arrays)


def save_npz_atomic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``path`` so that a crash leaves either the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
