"""Every FedPart/FNU config parses and its round count matches its model's schedule."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedapp.core.config import load_toml_config
from fedapp.core.masks import layer_groups
from fedapp.methods.fedpart import plan_of
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.sim.run_local import full_config

CONFIGS = sorted(Path(__file__).resolve().parents[1].glob("configs/f*-*.toml"))
SHAPES = {"digits": ((1, 8, 8), 10), "cifar10": ((3, 32, 32), 10), "cifar100": ((3, 32, 32), 100)}
GROUPS = {"cnn-bn": 6, "resnet8": 10, "resnet18": 21}


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name.startswith(("fedpart-", "fnu-"))], ids=lambda p: p.stem)
def test_fedpart_config_schedule_fits(path: Path) -> None:
    cfg, method, params = resolve(full_config(load_toml_config(path)))
    assert method.name == "fedpart" and cfg.run_dir == f"runs/{path.stem}"
    shape, classes = SHAPES[cfg.dataset]
    with torch.device("meta"):
        groups = layer_groups(build_model(cfg, shape, classes))
    assert len(groups) == GROUPS[cfg.model]
    plan = plan_of(cfg, params, len(groups))
    assert len(plan) == cfg.num_server_rounds
    assert (params.cycles == 0) == path.name.startswith("fnu-")
