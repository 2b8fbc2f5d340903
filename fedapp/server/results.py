"""Run folder: config.json (resolved config, and under ``provenance`` what produced the run),
metrics.jsonl (one row per round), the final global model (model.npz), written as the run
goes so nothing done is lost. Starting a run empties the folder's ``client-state`` (the
simulation's disk store). Which folder, and whether it may be used, is fedapp.server.rundir's job."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.core.config import RunConfig, kebab
from fedapp.core.safe_read import UnsafeFile, read_text
from fedapp.server.rundir import CLIENT_STATE

log = logging.getLogger("flwr")
PROVENANCE = "provenance"


def resolved_config(cfg: RunConfig, params: Any) -> dict[str, Any]:
    out = {kebab(k): v for k, v in dataclasses.asdict(cfg).items()}
    if params is not None:
        out.update({kebab(k): v for k, v in dataclasses.asdict(params).items()})
    return out


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    return v


class RunWriter:
    def __init__(self, run_dir: str | Path, config: dict[str, Any], keep_rounds: int = 0, provenance: dict[str, Any] | None = None):
        """Start ``metrics.jsonl`` afresh, or (resuming) keep its rows up to round ``keep_rounds``.
        A resumed run's provenance lists the earlier starts under ``earlier``."""
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        if not keep_rounds:  # a new run must not start from an earlier run's personal models
            shutil.rmtree(self.dir / CLIENT_STATE, ignore_errors=True)
        if provenance is not None:
            before = read_provenance(self.dir) if keep_rounds else {}
            earlier = [*before.pop("earlier", []), before] if before else []
            config = {**config, PROVENANCE: {**provenance, **({"earlier": earlier} if earlier else {})}}
        (self.dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        self.metrics_path = self.dir / "metrics.jsonl"
        kept = read_metrics_upto(self.dir, keep_rounds) if keep_rounds else []
        tmp = self.metrics_path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        tmp.replace(self.metrics_path)
        self.rows = hashlib.sha256(rows_text(kept).encode())

    def append(self, row: dict[str, Any]) -> None:
        line = json.dumps({k: _clean(v) for k, v in row.items()}) + "\n"
        with self.metrics_path.open("a") as fh:
            fh.write(line)
        self.rows.update(rows_text([json.loads(line)]).encode())

    def rows_digest(self) -> str:
        """The digest of every row written so far, as ``rows_digest`` computes it from the file."""
        return self.rows.hexdigest()

    def write_json(self, name: str, data: Any) -> Path:
        path = self.dir / name
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return path

    def save_model(self, arrays: dict[str, np.ndarray]) -> Path:
        path = self.dir / "model.npz"
        np.savez(path, **arrays)  # type: ignore[arg-type]
        return path


def read_metrics(run_dir: str | Path, energy: bool = False) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl; with ``energy``, metrics-energy.jsonl (a copy with a wall-plug
    meter joined, ``fedapp energy join``) where it exists."""
    path = Path(run_dir) / "metrics.jsonl"
    joined = Path(run_dir) / "metrics-energy.jsonl"
    if energy and joined.exists():
        path = joined
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a fedapp run folder?")
    return parse_rows(path)


def rows_text(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def rows_digest(rows: list[dict[str, Any]]) -> str:
    """What a checkpoint records of the rows written before it: its run's identity (fedapp.server.checkpoint)."""
    return hashlib.sha256(rows_text(rows).encode()).hexdigest()


def read_metrics_upto(run_dir: str | Path, last: int) -> list[dict[str, Any]]:
    """The rows of metrics.jsonl up to round ``last`` ([] without the file); a row without an integer round is an error."""
    path = Path(run_dir) / "metrics.jsonl"
    if not os.path.lexists(path):
        return []
    rows = parse_rows(path)
    for i, r in enumerate(rows):
        if not isinstance(r.get("round"), int) or isinstance(r["round"], bool):
            raise UnsafeFile(path, f"row {i + 1} has no integer 'round' ({str(r.get('round'))[:40]!r}): not a fedapp metrics file")
    return [r for r in rows if r["round"] <= last]


def parse_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a jsonl file, read as a regular file inside its folder (fedapp.core.safe_read). A
    torn last line (a run killed mid-write) is dropped with a warning; a bad line anywhere else, or
    a line that is JSON but not an object, is an error naming the file and line."""
    lines = read_text(path, path.parent).splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            if i == last:
                log.warning("%s: dropped its torn last line %d (a run stopped while writing it)", path, i + 1)
                break
            raise UnsafeFile(path, f"line {i + 1} is not a JSON row ({err.msg}): the file is damaged") from None
        if not isinstance(rows[-1], dict):
            raise UnsafeFile(path, f"line {i + 1} is JSON but not a row object ({type(rows[-1]).__name__}): the file is damaged")
    return rows


def read_config_and_provenance(run_dir: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """config.json read once: the resolved run-config and, apart, its provenance record."""
    path = Path(run_dir) / "config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    found = config.pop(PROVENANCE, {})
    return config, dict(found) if isinstance(found, dict) else {}


def read_config(run_dir: str | Path) -> dict[str, Any]:
    """The resolved run-config (without the provenance record)."""
    return read_config_and_provenance(run_dir)[0]


def read_provenance(run_dir: str | Path) -> dict[str, Any]:
    """config.json's provenance record; {} where there is none or the file is not JSON."""
    try:
        return read_config_and_provenance(run_dir)[1]
    except ValueError:
        return {}


ENERGY_KEYS = ("round_j", "external_j")  # on-device meters first, then a joined wall-plug log


@dataclasses.dataclass
class Run:
    path: Path
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)  # config.json's record of what produced it

    @property
    def label(self) -> str:
        return self.path.name

    def series(self, key: str) -> list[float]:
        return [float(r[key]) for r in self.rows if r.get(key) is not None]

    def running_total(self, keys: tuple[str, ...]) -> list[float]:
        """Per round, the sum of ``keys`` over this and all earlier rounds (missing counts as 0)."""
        total, out = 0.0, []
        for r in self.rows:
            total += sum(float(r.get(k) or 0.0) for k in keys)
            out.append(total)
        return out

    def cumulative_bytes(self, direction: str = "both") -> list[float]:
        """Running total of bytes on the wire: ``up``, ``down`` or ``both``."""
        return self.running_total({"up": ("bytes_up",), "down": ("bytes_down",), "both": ("bytes_up", "bytes_down")}[direction])

    @property
    def energy_key(self) -> str | None:
        return next((k for k in ENERGY_KEYS if any(r.get(k) is not None for r in self.rows)), None)

    def cumulative_joules(self) -> list[float] | None:
        k = self.energy_key
        return None if k is None else self.running_total((k,))

    def joules_to(self, target: float, key: str = "accuracy") -> float | None:
        cum = self.cumulative_joules()
        for r, j in zip(self.rows, cum or [], strict=False):
            if r.get(key) is not None and float(r[key]) >= target:
                return j
        return None

    def total(self, key: str) -> float:
        return sum(self.series(key))

    def rounds_to(self, target: float, key: str = "accuracy") -> int | None:
        for r in self.rows:
            if r.get(key) is not None and float(r[key]) >= target:
                return int(r["round"])
        return None
