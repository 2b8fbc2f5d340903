"""Client state versioned by round, so a resumed run restores every client as of its checkpoint.

Each save in round R writes a version stamped with R and the *attempt* (one per server start)
that wrote it, into the store's current slot; the newest version older than R moves to the
``prev`` slot first. A message reads the newest version that belongs to the run (below). Two
versions suffice: a kill -9 during round R+1 leaves, per client, at most one version newer
than the checkpoint (R+1, in the current slot), and the one before it is kept.

Which versions count comes from the server's *lineage*: the first round of every attempt
(``1:,6:9f3a01`` = the run started at round 1, was resumed at round 6 by attempt ``9f3a01``).
A version belongs to the run iff the attempt running at its round wrote it; a version that a
killed attempt wrote after its last checkpoint is ignored and replaced. A fresh run sends no
lineage (one attempt, ``""``), so its messages are what they were before versioning.

A version read for use is checked first: every float entry finite, and each record the method
declares (``ClientPolicy.state_schema``) with exactly its names, shapes and dtypes. A version
that fails is moved aside (a file renamed ``*.bad-<UTC time>``) and the message fails once,
naming it; the client then continues from its previous version, or afresh.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from fedapp.core.state import SlotStore, StateError, record_of, replace_records

ROUND, ATTEMPT = "@/round", "@/attempt"  # version stamp entries ('@' is never a state key)
PREV = "prev"
Schema = Mapping[str, Mapping[str, tuple[tuple[int, ...], np.dtype]]]  # key -> array name -> (shape, dtype)
ATTEMPT_RE = re.compile(r"[0-9a-f]{0,32}")


@dataclass(frozen=True)
class Lineage:
    """(first round, attempt id) of every server start of a run, oldest first."""

    starts: tuple[tuple[int, str], ...] = ((1, ""),)

    @classmethod
    def parse(cls, text: str) -> Lineage:
        """``"1:,6:9f3a01"`` (from the server's message config); '' is a fresh run."""
        if not text:
            return cls()
        starts: list[tuple[int, str]] = []
        for part in text.split(","):
            first, _, attempt = part.partition(":")
            if not first.isdigit() or not ATTEMPT_RE.fullmatch(attempt) or (starts and int(first) <= starts[-1][0]):
                raise ValueError(f"state-lineage {text[:200]!r} from the server is not '<round>:<hex>,...' with rising rounds")
            starts.append((int(first), attempt))
        return cls(tuple(starts))

    def text(self) -> str:
        return ",".join(f"{r}:{a}" for r, a in self.starts)

    @property
    def attempt(self) -> str:
        return self.starts[-1][1]

    def owner(self, server_round: int) -> str:
        """The attempt whose rounds include ``server_round`` (rounds before the first: the first)."""
        owner = self.starts[0][1]
        for first, attempt in self.starts:
            if server_round >= first:
                owner = attempt
        return owner


def stamp(entries: Mapping[str, np.ndarray]) -> tuple[int, str]:
    """A version's (round, attempt); an unstamped slot (written without versions) is round 0.
    ValueError for a stamp this module did not write."""
    if ROUND not in entries:
        return 0, ""
    r, attempt = entries[ROUND], entries.get(ATTEMPT, np.array(""))
    if r.shape != (1,) or r.dtype.kind not in "iu" or attempt.shape != () or attempt.dtype.kind != "U":
        raise ValueError(f"version stamp {ROUND!r} {r.dtype}{list(r.shape)}, {ATTEMPT!r} {attempt.dtype}{list(attempt.shape)}")
    return int(r[0]), str(attempt)


class RoundStore:
    """The StateStore one message of round ``server_round`` uses: ``load`` sees the newest version
    that belongs to the run, ``save``/``save_all`` write version ``server_round``."""

    def __init__(self, slots: SlotStore, server_round: int, lineage: Lineage, schema: Schema | None = None) -> None:
        self.slots, self.round, self.lineage, self.schema = slots, server_round, lineage, schema or {}
        self._base: dict[int, dict[str, np.ndarray]] = {}
        self._read: dict[tuple[int, str], dict[str, np.ndarray]] = {}

    def read(self, partition: int, slot: str) -> dict[str, np.ndarray]:
        """A slot's entries, read once per message."""
        if (partition, slot) not in self._read:
            self._read[partition, slot] = self.slots.read(partition, slot)
        return self._read[partition, slot]

    def belongs(self, entries: Mapping[str, np.ndarray]) -> bool:
        r, attempt = stamp(entries)
        return self.lineage.owner(r) == attempt

    def follows(self, entries: Mapping[str, np.ndarray]) -> bool:
        """A version of this run older than this message's round (one with a bad stamp is not)."""
        try:
            return bool(entries) and self.belongs(entries) and stamp(entries)[0] < self.round
        except ValueError:
            return False

    def base(self, partition: int) -> dict[str, np.ndarray]:
        """The newest version this message may use ({} if none), checked once per message."""
        if partition not in self._base:
            found: dict[str, np.ndarray] = {}
            for slot in ("", PREV):
                entries = self.read(partition, slot)
                try:
                    mine = bool(entries) and self.belongs(entries)
                except ValueError as err:
                    self.fail(partition, slot, str(err))
                if mine:
                    self.check(partition, slot, entries)
                    found = entries
                    break
            self._base[partition] = found
        return self._base[partition]

    def check(self, partition: int, slot: str, entries: Mapping[str, np.ndarray]) -> None:
        """Finite floats, declared records as declared; else move the version aside and fail this message."""
        problem = bad_entry(entries, self.schema)
        if problem:
            self.fail(partition, slot, f"(round {stamp(entries)[0]}): {problem}")

    def fail(self, partition: int, slot: str, problem: str) -> NoReturn:
        what, aside = self.slots.set_aside(partition, slot)
        self._read.pop((partition, slot), None)
        raise StateError(
            f"client state {what} {problem}; moved to {aside}, the client continues from its previous state or afresh next round"
        )

    def load(self, partition: int, key: str) -> dict[str, np.ndarray]:
        return record_of(self.base(partition), key)

    def save(self, partition: int, key: str, arrays: dict[str, np.ndarray]) -> None:
        self.save_all(partition, {key: arrays})

    def save_all(self, partition: int, records: dict[str, dict[str, np.ndarray]]) -> None:
        base = {n: a for n, a in self.base(partition).items() if not n.startswith("@/")}
        new = {**replace_records(base, records), ROUND: np.array([self.round], np.int64), ATTEMPT: np.array(self.lineage.attempt)}
        if self.follows(self.read(partition, "")):
            self.slots.move(partition, "", PREV)  # the version this one follows: kept until the next save
        elif self.read(partition, PREV) and not self.follows(self.read(partition, PREV)):
            self.slots.drop(partition, PREV)  # a killed attempt's
        self.slots.write(partition, "", new)
        self._read.pop((partition, PREV), None)
        self._read[partition, ""] = self._base[partition] = new


def bad_entry(entries: Mapping[str, np.ndarray], schema: Schema) -> str:
    """What is wrong with a version ('' if nothing): a non-finite float, or a declared record
    whose names, shapes or dtypes differ from the declaration."""
    for name, a in entries.items():
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            return f"entry {name!r} is not finite ({int((~np.isfinite(a)).sum())} of {a.size} values)"
    for key, want in schema.items():
        got = record_of(dict(entries), key)
        if not got:
            continue
        if set(got) != set(want):
            odd = sorted(set(got) ^ set(want))[0]
            return f"record {key!r}: entry {odd!r} {'is not expected' if odd in got else 'is missing'}"
        for name, (shape, dtype) in want.items():
            if got[name].shape != tuple(shape) or got[name].dtype != dtype:
                return f"entry '{key}/{name}' is {got[name].dtype}{list(got[name].shape)}, expected {np.dtype(dtype)}{list(shape)}"
    return ""
