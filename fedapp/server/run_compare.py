"""Two runs compared on what must agree: every metrics row without its wall-clock keys, and every
array of ``model.npz`` exactly (dtype and values). One comparison for `fedapp reproduce`,
``scripts/config_snapshot.py compare`` and the tests that check determinism and resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

WIRE = frozenset({"wire_bytes_down", "wire_bytes_up", "wire_bytes_clients", "mb_total"})
"""Serialized message sizes: they include each message's config, which after a resume also names the
run's lineage (fedapp.core.state_rounds), so a resumed run's rows differ from the uninterrupted run's there."""


def is_timing(key: str) -> bool:
    """Wall-clock keys (round and client seconds, energy ledger windows): they differ run to run."""
    return key in ("seconds", "train_seconds", "time_start", "time_end", "client_windows") or key.endswith(("_s", "_j"))


def outcome_rows(run_dir: Path, skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Every round's row with the timing keys (and ``skip``) dropped."""
    return [
        {k: v for k, v in json.loads(line).items() if not is_timing(k) and k not in skip}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


def differing_keys(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    """The keys that differ in any pair of rows at the same position."""
    return sorted({k for x, y in zip(a, b, strict=False) for k in set(x) | set(y) if x.get(k) != y.get(k)})


def first_row_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str | None:
    """The first round and key where ``b``'s rows differ from ``a``'s, in words; None where equal."""
    for x, y in zip(a, b, strict=False):
        keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
        if keys:
            k = keys[0]
            more = f" (also {', '.join(keys[1:4])}{', ...' if len(keys) > 4 else ''})" if len(keys) > 1 else ""
            return f"round {x.get('round', y.get('round'))}: key {k!r} was {x.get(k, 'absent')!r}, now {y.get(k, 'absent')!r}{more}"
    if len(a) != len(b):
        return f"{len(a)} rows recorded, {len(b)} now"
    return None


def model_differences(a: Path, b: Path) -> list[str]:
    """The arrays of two model.npz files that differ (dtype or any value), in file order; a key
    present in only one of them is named as such."""
    with np.load(a) as x, np.load(b) as y:
        only = [f"{k} (only in {a.name} of {a.parent.name})" for k in x.files if k not in y.files]
        only += [f"{k} (only in {b.name} of {b.parent.name})" for k in y.files if k not in x.files]
        changed = [k for k in x.files if k in y.files and (x[k].dtype != y[k].dtype or not np.array_equal(x[k], y[k]))]
    return only + changed
