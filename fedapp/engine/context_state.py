"""The in-process engine's Context.state, kept with every checkpoint so ``resume=true`` restores it.

A killed process loses its nodes' Contexts, and with them the state of every client that uses
the ``context`` store. The server loop calls ``save`` just before each checkpoint and ``restore``
on resume; both use the run folder's client-state folder in the disk store's file layout
(``client-<p>.npz``, ``client-<p>.prev.npz``), so the files read like a disk-store run's. Only
slots that changed since the last save are written (a current file that became the previous
version is renamed), ``prev`` slots before current ones, and synced together at the end: a kill
in the middle leaves each client's previous version on disk (fedapp.core.state_rounds).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, Context

from fedapp.core.atomic import sync_files
from fedapp.core.state import ContextStore, DiskStore, save_npz_atomic
from fedapp.core.state_rounds import PREV
from fedapp.core.wire import from_record

SLOTS = ("", PREV)


def uses_context(run_config: Mapping[str, Any], node_config: Mapping[str, Any]) -> bool:
    """Whether a node keeps client state in its Context (fedapp.client.handlers.state_store's rule)."""
    kind = str(run_config.get("state-store", "auto"))
    return kind == "context" or (kind == "auto" and not node_config.get("state-dir"))


class ContextState:
    def __init__(self, contexts: Mapping[int, Context]) -> None:
        self.contexts = contexts
        self.saved: dict[tuple[int, str], ArrayRecord] = {}  # what each file holds now (by identity)

    def stores(self) -> list[tuple[int, ContextStore]]:
        return [(int(c.node_config["partition-id"]), ContextStore(c)) for c in self.contexts.values()]  # type: ignore[call-overload]

    def save(self, folder: Path) -> None:
        disk, written = DiskStore(folder), []
        for slot in (PREV, ""):
            for pid, store in self.stores():
                rec = store.context.state.array_records.get(store.name(pid, slot))
                if rec is None:
                    if self.saved.pop((pid, slot), None) is not None:
                        disk.drop(pid, slot)
                elif self.saved.get((pid, slot)) is rec:
                    continue
                elif slot == PREV and self.saved.get((pid, "")) is rec:  # the current file became the previous version
                    disk.move(pid, "", PREV)
                    self.saved[pid, PREV] = self.saved.pop((pid, ""))
                else:
                    save_npz_atomic(disk.path(pid, slot), from_record(rec), sync=False)
                    written.append(disk.path(pid, slot))
                    self.saved[pid, slot] = rec
        if written:
            sync_files(written)  # before the checkpoint that counts on them

    def restore(self, folder: Path) -> None:
        disk = DiskStore(folder)
        for pid, store in self.stores():
            for slot in SLOTS:
                entries = disk.read(pid, slot)
                if entries:
                    store.write(pid, slot, entries)
                    self.saved[pid, slot] = store.context.state.array_records[store.name(pid, slot)]
