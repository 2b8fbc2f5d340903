"""Run folder: config.json (resolved config), metrics.jsonl (one row per round),
the final global model (model.npz), written as the run goes so nothing done is lost.
Starting a run empties the folder's ``client-state`` (the simulation's disk store)."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.config import RunConfig, kebab


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
    def __init__(self, run_dir: str | Path, config: dict[str, Any], keep_rounds: int = 0):
        """Start ``metrics.jsonl`` afresh, or (resuming) keep its rows up to round ``keep_rounds``."""
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        if not keep_rounds:  # a new run must not start from an earlier run's personal models
            shutil.rmtree(self.dir / "client-state", ignore_errors=True)
        (self.dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        self.metrics_path = self.dir / "metrics.jsonl"
        kept = [r for r in read_metrics(self.dir) if int(r["round"]) <= keep_rounds] if keep_rounds and self.metrics_path.exists() else []
        tmp = self.metrics_path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        tmp.replace(self.metrics_path)

    def append(self, row: dict[str, Any]) -> None:
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")

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
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_config(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "config.json"
    return json.loads(path.read_text()) if path.exists() else {}
