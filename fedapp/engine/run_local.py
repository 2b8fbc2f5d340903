"""Run a federation in-process (fedapp run): same code path as `flwr run`, no Ray."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedapp.config import RunConfig, defaults_of
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.registry import all_param_classes, resolve
from fedapp.progress import round_bar
from fedapp.server import serve


def full_config(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every key's default (as pyproject declares them) with ``overrides`` on top."""
    out: dict[str, Any] = {}
    for cls in all_param_classes():
        out.update(defaults_of(cls))
    out.update(overrides)
    return out


def run_local(overrides: Mapping[str, Any], node_configs: list[dict[str, Any]] | None = None, progress: bool = False) -> Path:
    """``progress``: a progress bar over the rounds (a terminal) instead of one log line per round."""
    from client_app import app as client_app

    raw = full_config(overrides)
    cfg: RunConfig = resolve(raw)[0]
    grid = LocalGrid(client_app, raw, cfg.num_clients, node_configs)
    if not progress:
        return serve(grid, raw, discovery_timeout=5.0)
    with round_bar(cfg.num_server_rounds, f"{cfg.method} {Path(cfg.run_dir).name}") as report:
        return serve(grid, raw, discovery_timeout=5.0, report=report)
