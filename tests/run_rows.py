"""metrics.jsonl rows without their wall-clock fields, for tests that compare two runs
that must agree on everything else (determinism, resume)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def is_timing(key: str) -> bool:
    """Wall-clock keys (round and client seconds, energy ledger windows): they differ run to run."""
    return key in ("seconds", "train_seconds", "time_start", "time_end", "client_windows") or key.endswith(("_s", "_j"))


def outcome_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Every round's row with the timing keys dropped."""
    return [
        {k: v for k, v in json.loads(line).items() if not is_timing(k)} for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
