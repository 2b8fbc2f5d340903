"""Wall-plug meters: a CSV of timestamped watts, joined to rounds after the run.

The run records every round's wall-clock window (``time_start``/``time_end``) and
every client's training/evaluation windows (``client_windows``), all in Unix time.
``join`` integrates the meter's trace over those windows and writes
``metrics-energy.jsonl`` beside ``metrics.jsonl`` (which stays untouched); joining a
second meter (another board) adds to the same file. Per round:

* ``external_round_j[label]``: the meter's joules over the round window, where label is
  the client the plug powers (``--client``) or "all" for a plug feeding the whole rig;
* ``external_train_j[pid]``: with ``--client``, joules over that client's training window;
* ``external_j``: the sum over joined meters, and ``external_coverage``: the least share
  of a round window any meter's trace covered (< 1 means the log starts late or ends early).
"""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.core.config import ConfigError
from fedapp.energy.base import integrate
from fedapp.server.results import read_metrics

TIME_RE = re.compile(r"time|date|^ts$|epoch", re.I)
WATT_RE = re.compile(r"watt|power|^w$|^p$", re.I)


def parse_time(text: str) -> float:
    """Unix seconds (or milliseconds) or an ISO 8601 date-time (naive: this machine's local time)."""
    try:
        v = float(text)
        return v / 1000.0 if v > 1e11 else v
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ConfigError(f"meter CSV time {text!r}: expected Unix seconds or an ISO 8601 date-time") from None


def pick(header: list[str], wanted: str | None, pattern: re.Pattern[str], what: str, fallback: int | None) -> int:
    if wanted is not None:
        if wanted not in header:
            raise ConfigError(f"meter CSV has no column {wanted!r} ({what}); columns: {', '.join(header)}")
        return header.index(wanted)
    for i, h in enumerate(header):
        if pattern.search(h):
            return i
    if fallback is None:
        raise ConfigError(f"meter CSV: no {what} column among {', '.join(header)}; name it with --{what}-col")
    return fallback


def read_trace(
    path: str | Path, time_col: str | None = None, watts_col: str | None = None, offset: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """(Unix times, watts) sorted by time; ``offset`` seconds are added to the meter's clock."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"meter CSV {str(p)!r} does not exist")
    with p.open(newline="") as fh:
        rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    if len(rows) < 3:
        raise ConfigError(f"meter CSV {str(p)!r}: needs a header and at least two samples")
    header = [h.strip() for h in rows[0]]
    ti = pick(header, time_col, TIME_RE, "time", 0)
    wi = pick(header, watts_col, WATT_RE, "watts", None)
    t = np.array([parse_time(r[ti]) for r in rows[1:]]) + offset
    w = np.array([float(r[wi]) for r in rows[1:]])
    order = np.argsort(t, kind="stable")
    return t[order], w[order]


def join(run_dir: str | Path, csv_path: str | Path, client: int | None = None, **trace_opts: Any) -> tuple[Path, list[dict[str, Any]]]:
    run = Path(run_dir)
    out = run / "metrics-energy.jsonl"
    rows = read_metrics(run) if not out.exists() else [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    if rows and "time_start" not in rows[0]:
        raise ConfigError(f"{run}/metrics.jsonl has no round times (time_start/time_end): it predates energy accounting")
    t, w = read_trace(csv_path, **trace_opts)
    label = "all" if client is None else str(client)
    for row in rows:
        j, cov = integrate(t, w, row["time_start"], row["time_end"])
        row.setdefault("external_round_j", {})[label] = j
        row.setdefault("external_round_coverage", {})[label] = cov
        window = row.get("client_windows", {}).get(label, {}).get("train")
        if client is not None and window:
            row.setdefault("external_train_j", {})[label] = integrate(t, w, window[0], window[1])[0]
        row["external_j"] = sum(row["external_round_j"].values())
        row["external_coverage"] = min(row["external_round_coverage"].values())
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out, rows
