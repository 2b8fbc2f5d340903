"""Per-client state that outlives a round (scores, masks, personal parameters, flags).

A client's state is a set of named records, each a dict of arrays: ``store.load(partition,
key)`` and ``store.save(partition, key, arrays)`` (``save_all`` for several records that must
change together), so each method names its own records and never filters or merges another's.
Two stores with one interface (``SlotStore``: records kept as ``<key>/<name>`` entries of one
slot, each store only reading, writing, moving and dropping whole slots), each holding per
partition two *slots* (the current version and ``prev``; fedapp.core.state_rounds decides
which one a message reads):

* ``ContextStore`` keeps arrays in Flower's ``Context.state`` (per run, per node;
  shipped with every message in deployment, lost when a SuperNode restarts; the in-process
  engine writes it beside each checkpoint, fedapp.engine.context_state).
* ``DiskStore`` writes one ``.npz`` per client and slot under a folder (the run folder in
  simulation, the node's ``state-dir`` in deployment), atomically, so state survives
  restarts and memory does not grow with thousands of simulated clients.

A state file is read only as a regular file inside its store's folder, its archive members checked
before any is read (fedapp.core.safe_read). One that cannot be read (a disk error, a file written
by something else, a FIFO, a link out of the folder) fails
that round's message with an error naming it, and is moved aside to ``<name>.corrupt`` so
the client starts afresh the next round, as after a lost state-dir (every method already
handles that). Failing the round puts the file's name in the server's failure_reasons, where
the operator sees it; keeping it failing would lose the client for the rest of the run.
A file that reads but holds wrong values is handled the same way one level up
(fedapp.core.state_rounds: ``*.bad-<time>``). The run token that names a run's state folder
comes from the server and is checked before it becomes a path.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import zipfile
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Protocol

import numpy as np
from flwr.app import Context

from fedapp.core.atomic import write_atomic
from fedapp.core.safe_read import NPZ_LIMIT, UnsafeFile, open_regular, read_npz
from fedapp.core.wire import from_record, to_record

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


KEY = re.compile(r"[a-z][a-z0-9-]{0,63}")  # a state key: what a method calls one of its records


def check_key(key: str) -> str:
    if not KEY.fullmatch(key):
        raise ValueError(f"state key {key!r}: expected lower-case letters, digits and '-', starting with a letter")
    return key


class StateStore(Protocol):
    """A client's state as named records: ``load(partition, key)`` -> that record's arrays ({} if
    never saved); ``save`` replaces one record, ``save_all`` several at once (atomically on disk),
    leaving every other record of the partition as it was."""

    def load(self, partition: int, key: str) -> dict[str, np.ndarray]: ...

    def save(self, partition: int, key: str, arrays: dict[str, np.ndarray]) -> None: ...

    def save_all(self, partition: int, records: dict[str, dict[str, np.ndarray]]) -> None: ...


class SlotStore(ABC):
    """A ``StateStore`` over whole slots: a record is the ``<key>/<name>`` entries of a partition's
    current slot, so ``load``, ``save`` and ``save_all`` are the same for every store; a store
    reads, writes, moves, drops and sets aside one partition's slot (``""``: the current one)."""

    def load(self, partition: int, key: str) -> dict[str, np.ndarray]:
        return record_of(self.read(partition), key)

    def save(self, partition: int, key: str, arrays: dict[str, np.ndarray]) -> None:
        self.save_all(partition, {key: arrays})

    def save_all(self, partition: int, records: dict[str, dict[str, np.ndarray]]) -> None:
        self.write(partition, "", replace_records(self.read(partition), records))

    @abstractmethod
    def read(self, partition: int, slot: str = "") -> dict[str, np.ndarray]: ...

    @abstractmethod
    def write(self, partition: int, slot: str, entries: dict[str, np.ndarray]) -> None: ...

    @abstractmethod
    def move(self, partition: int, src: str, dst: str) -> None: ...

    @abstractmethod
    def drop(self, partition: int, slot: str) -> None: ...

    @abstractmethod
    def set_aside(self, partition: int, slot: str) -> tuple[str, str]:
        """Put aside a slot that failed its checks; returns (what it was, where it went)."""


class ContextStore(SlotStore):
    """One ArrayRecord per partition and slot in ``context.state`` (``fedapp-<partition>`` and
    ``fedapp-<partition>.prev``), its entries named ``<key>/<array name>`` as in a state file."""

    def __init__(self, context: Context) -> None:
        self.context = context

    def name(self, partition: int, slot: str = "") -> str:
        return f"fedapp-{partition}" + (f".{slot}" if slot else "")

    def read(self, partition: int, slot: str = "") -> dict[str, np.ndarray]:
        rec = self.context.state.array_records.get(self.name(partition, slot))
        return from_record(rec) if rec is not None else {}

    def write(self, partition: int, slot: str, entries: dict[str, np.ndarray]) -> None:
        self.context.state[self.name(partition, slot)] = to_record(entries)

    def move(self, partition: int, src: str, dst: str) -> None:
        records = self.context.state.array_records
        if self.name(partition, src) in records:
            self.context.state[self.name(partition, dst)] = records[self.name(partition, src)]
            del self.context.state[self.name(partition, src)]

    def drop(self, partition: int, slot: str) -> None:
        if self.name(partition, slot) in self.context.state.array_records:
            del self.context.state[self.name(partition, slot)]

    def set_aside(self, partition: int, slot: str) -> tuple[str, str]:
        """Forget a slot that failed its checks; returns (what it was, where it went)."""
        self.drop(partition, slot)
        return f"Context.state record {self.name(partition, slot)!r}", "dropped"


class DiskStore(SlotStore):
    """One uncompressed ``.npz`` per client and slot (``client-<p>.npz``, ``client-<p>.prev.npz``)
    holding every record as ``<key>/<array name>`` entries, replaced atomically. A file with an
    entry outside any record was written by an older fedapp (one unkeyed dict per client): it is
    refused with a message, never read as empty state."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, partition: int, slot: str = "") -> Path:
        return self.root / (f"client-{partition}" + (f".{slot}" if slot else "") + ".npz")

    def write(self, partition: int, slot: str, entries: dict[str, np.ndarray]) -> None:
        save_npz_atomic(self.path(partition, slot), entries)

    def move(self, partition: int, src: str, dst: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path(partition, src), self.path(partition, dst))

    def drop(self, partition: int, slot: str) -> None:
        self.path(partition, slot).unlink(missing_ok=True)

    def set_aside(self, partition: int, slot: str) -> tuple[str, str]:
        """Rename a file that failed its checks to ``<name>.bad-<UTC time>``; returns (file, new name)."""
        p = self.path(partition, slot)
        aside = p.with_name(f"{p.name}.bad-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        os.replace(p, aside)
        return str(p), aside.name

    def read(self, partition: int, slot: str = "") -> dict[str, np.ndarray]:
        p = self.path(partition, slot)
        if not os.path.lexists(p):
            return {}
        try:
            arrays = read_npz(p, self.root)
        except (OSError, ValueError) as err:
            aside = p.with_name(p.name + ".corrupt")
            try:
                os.replace(p, aside)
                where = f"moved to {aside.name}"
            except OSError as move:
                where = f"left in place ({move.strerror})"
            why = err.why if isinstance(err, UnsafeFile) else f"{type(err).__name__}: {err}"
            raise StateError(f"client state file {p} is unreadable ({why}); {where}, the client starts afresh next round") from None
        unkeyed = sorted(n for n in arrays if "/" not in n)
        if unkeyed:
            raise StateError(
                f"client state file {p} was written by an older fedapp (entry {unkeyed[0]!r} belongs to no state key): "
                "this run cannot be resumed with this version; start it afresh (overwrite=true or a new run-dir)"
            )
        return arrays


def record_of(entries: dict[str, np.ndarray], key: str) -> dict[str, np.ndarray]:
    """One record's arrays out of a slot's ``<key>/<name>`` entries."""
    prefix = check_key(key) + "/"
    return {name[len(prefix) :]: a for name, a in entries.items() if name.startswith(prefix)}


def replace_records(entries: dict[str, np.ndarray], records: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``entries`` with each record of ``records`` replaced (an empty dict removes it), every other entry kept."""
    replaced = tuple(check_key(k) + "/" for k in records)
    kept = {n: a for n, a in entries.items() if not n.startswith(replaced)}
    return {**kept, **{f"{key}/{name}": a for key, arrays in records.items() for name, a in arrays.items()}}


def unkeyed_files(folder: Path) -> list[Path]:
    """The client state files in ``folder`` written by an older fedapp (an entry outside any
    record); only each archive's list of names is read."""
    old = []
    for p in sorted(folder.glob("client-*.npz")):
        try:
            with open_regular(p, folder, NPZ_LIMIT) as fh, zipfile.ZipFile(fh) as z:
                if any("/" not in n.removesuffix(".npy") for n in z.namelist()):
                    old.append(p)
        except (OSError, ValueError, zipfile.BadZipFile):
            continue  # not a regular file in the folder, or unreadable: the client moves it aside itself (DiskStore)
    return old


def save_npz_atomic(path: Path, arrays: dict[str, np.ndarray], sync: bool = True) -> None:
    """Write ``path`` so that a crash leaves either the old file or the new one, never half
    (``sync=False``: the caller syncs, fedapp.core.atomic.sync_files)."""
    write_atomic(path, lambda fh: np.savez(fh, **arrays), sync=sync)  # type: ignore[arg-type]
