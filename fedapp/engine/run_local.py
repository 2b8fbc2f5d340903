"""Run a federation in-process (fedapp run): same code path as `flwr run`, no Ray."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedapp.config import RunConfig, defaults_of
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.registry import all_param_classes, resolve
from fedapp.server import serve


def full_config(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every key's default (as pyproject declares them) with ``overrides`` on top."""
    out: dict[str, Any] = {}
    for cls in all_param_classes():
        out.update(defaults_of(cls))
    out.update(overrides)
    return out


def run_local(overrides: Mapping[str, Any], node_configs: list[dict[str, Any]] | None = None) -> Path:
    from client_app import app as client_app

    raw = full_config(overrides)
    cfg: RunConfig = resolve(raw)[0]
    grid = LocalGrid(client_app, raw, cfg.num_clients, node_configs)
    return serve(grid, raw, discovery_timeout=5.0)
