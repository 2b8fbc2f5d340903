"""Run a federation in-process (fedapp run): same code path as `flwr run`, no Ray.

The in-process engine is its own federation, so it decides the node count that
``num-clients = 0`` takes from the nodes elsewhere: the number of client groups an explicit
partition lists (``"0,1|2,3"``: 2), the number of sources for ``partition = "source"``,
else 2 (Flower's default simulated federation size). Relative run-dirs resolve against the
working directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedapp.core.config import PARTITION_RE, RunConfig, defaults_of
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.registry import all_param_classes, resolve
from fedapp.server.loop import serve
from fedapp.server.progress import round_bar

DEFAULT_NODES = 2  # flwr's default num-supernodes since 1.32


def full_config(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every key's default (as pyproject declares them) with ``overrides`` on top."""
    out: dict[str, Any] = {}
    for cls in all_param_classes():
        out.update(defaults_of(cls))
    out.update(overrides)
    return out


def node_count(cfg: RunConfig) -> int:
    """How many nodes the in-process federation has: ``num-clients``, or where it is 0 the rule above."""
    if cfg.num_clients:
        return cfg.num_clients
    if PARTITION_RE.match(cfg.partition):  # explicit class groups
        return len(cfg.partition.split("|"))
    if cfg.partition == "source":
        from fedapp.data import dataset_for

        groups = dataset_for(cfg).groups
        if groups is not None:
            return int(groups.max()) + 1
    return DEFAULT_NODES


def make_grid(client_app: Any, raw: Mapping[str, Any], nodes: int, node_configs: list[dict[str, Any]] | None) -> LocalGrid:
    """``LocalGrid``, or with ``engine-workers`` other than 1 the grid whose clients run on Ray actors (Ray imported only then)."""
    if str(raw.get("engine-workers", "1")) == "1":
        return LocalGrid(client_app, raw, nodes, node_configs)
    from fedapp.engine.ray_workers import RayGrid

    return RayGrid(client_app, raw, nodes, node_configs)


def run_local(overrides: Mapping[str, Any], node_configs: list[dict[str, Any]] | None = None, progress: bool = False) -> Path:
    """``progress``: a progress bar over the rounds (a terminal) instead of one log line per round."""
    from fedapp.client_app import app as client_app

    raw = full_config(overrides)
    cfg: RunConfig = resolve(raw)[0]
    nodes = cfg.num_clients or (len(node_configs) if node_configs else node_count(cfg))
    grid = make_grid(client_app, raw, nodes, node_configs)
    base, provenance = Path.cwd(), {"engine": "in-process" if type(grid) is LocalGrid else "in-process, Ray workers"}
    try:
        if not progress:
            return serve(grid, raw, base=base, provenance=provenance)
        with round_bar(cfg.num_server_rounds, cfg.method) as report:
            return serve(grid, raw, base=base, provenance=provenance, report=report)
    finally:
        grid.close()
