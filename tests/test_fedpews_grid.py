"""The FedPeWS grid script (scripts/fedpews_grid.py) builds valid run-configs: every entry
resolves without a ConfigError, and the paper's columns get the W, T, eta_g and lambda of
spec §5 (Table 2 cols 1-4, Table 6 cols 1 and 4)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from fedapp.core.config import load_toml_config
from fedapp.methods.fedpews import warmup_rounds
from fedapp.methods.proximal import proximal_mu, uses_prox
from fedapp.methods.registry import resolve
from fedapp.sim.run_local import full_config

ROOT = Path(__file__).resolve().parents[1]


def grid_module() -> Any:
    spec = importlib.util.spec_from_file_location("fedpews_grid", ROOT / "scripts" / "fedpews_grid.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GRID = grid_module()


def resolved(stem: str, extra: dict[str, Any]) -> Any:
    return resolve(full_config({**load_toml_config(ROOT / "configs" / f"{stem}.toml"), **extra}))


@pytest.mark.parametrize("group", sorted(GRID.GROUPS))
def test_every_grid_entry_resolves(group: str) -> None:
    names = [name for name, _, _ in GRID.GROUPS[group]]
    assert len(names) == len(set(names)), f"duplicate run names in {group}"
    for _, stem, extra in GRID.GROUPS[group]:
        resolved(stem, extra)


@pytest.mark.parametrize(
    ("group", "t", "w", "eta_g", "lam", "mu"),
    [
        ("n2", 200, 25, 1.0, 5.0, 0.0),
        ("n2-col2", 250, 50, 0.5, 2.0, 0.0),
        ("n2-col3", 400, 75, 0.25, 1.0, 0.0),
        ("e5", 500, 50, 0.1, 2.0, 0.0),
        ("prox-n2", 200, 25, 1.0, 0.1, 0.01),
        ("prox-e5", 500, 50, 0.1, 1.0, 0.01),
    ],
)
def test_paper_columns_match_the_spec(group: str, t: int, w: int, eta_g: float, lam: float, mu: float) -> None:
    pews = [(stem, extra) for name, stem, extra in GRID.GROUPS[group] if "pews" in name]
    baseline = [(stem, extra) for name, stem, extra in GRID.GROUPS[group] if "pews" not in name and name != "fixed"]
    assert len(pews) == 1 and len(baseline) == 1
    cfg, _, params = resolved(*pews[0])
    assert (cfg.num_server_rounds, warmup_rounds(params, cfg), cfg.server_lr, params.diversity_weight) == (t, w, eta_g, lam)
    assert proximal_mu(cfg) == mu
    base_cfg, _, _ = resolved(*baseline[0])
    assert (base_cfg.num_server_rounds, base_cfg.server_lr, uses_prox(base_cfg)) == (t, eta_g, mu > 0)


def test_jobs_skip_finished_runs(tmp_path: Path) -> None:
    jobs = GRID.jobs_for(tmp_path, ["n4"])
    assert len(jobs) == 3 * len(GRID.GROUPS["n4"])
    finished = Path(jobs[0][0])
    finished.mkdir(parents=True)
    (finished / "model.npz").write_bytes(b"")
    assert [j[0] for j in GRID.jobs_for(tmp_path, ["n4"])] == [j[0] for j in jobs[1:]]
    picked = GRID.jobs_for(tmp_path, ["n4"], (2,), frozenset({"fedpews"}))
    assert [(Path(j[0]).name, j[2]["seed"]) for j in picked] == [("fedpews-seed2", 2)]
    with pytest.raises(SystemExit, match="unknown group 'n5'"):
        GRID.jobs_for(tmp_path, ["n5"])
