"""metrics.jsonl rows without their wall-clock fields, for tests that compare two runs
that must agree on everything else (determinism, resume)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def is_timing(key: str) -> bool:
    """Wall-clock keys (round and client seconds, energy ledger windows): they differ run to run."""
    return key in ("seconds", "train_seconds", "time_start", "time_end", "client_windows") or key.endswith(("_s", "_j"))


WIRE = frozenset({"wire_bytes_down", "wire_bytes_up", "wire_bytes_clients", "mb_total"})
"""Serialized message sizes: they include each message's config, which after a resume also names the
run's lineage (fedapp.core.state_rounds), so a resumed run's rows differ from the uninterrupted run's there."""


def outcome_rows(run_dir: Path, skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Every round's row with the timing keys (and ``skip``) dropped."""
    return [
        {k: v for k, v in json.loads(line).items() if not is_timing(k) and k not in skip}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
