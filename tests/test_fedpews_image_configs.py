"""The paper's image settings run as shipped: configs/fedpews-cifar-mnist.toml (2 clients,
lambda 2) and configs/fedpews-path-oct-tissue.toml (3 clients, lambda 10), on small files
generated in the real formats, through the in-process engine with the CNN's conv masks.
Only the length is overridden (2 rounds, W = 1, 2 local steps)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedapp.core.config import load_toml_config
from fedapp.sim.run_local import run_local
from tests.data_files import write_cifar10, write_medmnist, write_mnist

ROOT = Path(__file__).resolve().parents[1]
SHORT = {"num-server-rounds": 2, "warmup-fraction": 0.5, "local-steps": 2, "batch-size": 8}


def write_sources(root: Path, name: str) -> None:
    if name == "cifar-mnist":
        write_cifar10(root, 4, 2, seed=1)
        write_mnist(root, 4, 2, seed=2)
    else:
        split = {"train": 4, "val": 1, "test": 2}
        write_medmnist(root, "pathmnist", 9, split, rgb=True, seed=5)
        write_medmnist(root, "octmnist", 4, split, seed=6)
        write_medmnist(root, "tissuemnist", 8, split, seed=7)


@pytest.mark.parametrize(("name", "clients"), [("cifar-mnist", 2), ("path-oct-tissue", 3)])
def test_paper_image_config_runs_warmup_then_full_rounds(tmp_path: Path, name: str, clients: int) -> None:
    write_sources(tmp_path / "data", name)
    config = load_toml_config(ROOT / "configs" / f"fedpews-{name}.toml")
    run_dir = tmp_path / "run"
    run_local({**config, **SHORT, "data-root": str(tmp_path / "data"), "run-dir": str(run_dir)})
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["round"], r["warmup"], r["clients"], r["failures"]) for r in rows] == [(1, True, clients, 0), (2, False, clients, 0)]
    with np.load(run_dir / "model.npz") as model:
        dense = sum(model[k].nbytes for k in model.files)
    # warmup: each client sends only its sub-model (~half the CNN at density ~0.5) plus mask bits
    assert 0 < rows[0]["mask_density"] < 1 and rows[0]["bytes_up"] < 0.8 * clients * dense
    assert rows[1]["bytes_up"] >= clients * dense  # full rounds: the dense model from everyone
