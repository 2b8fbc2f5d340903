"""Integration: `flwr run` of FedAvg on cifar-mnist built from generated CIFAR-10 pickles
and MNIST IDX files, one source per client (the FedPeWS CIFAR-MNIST setting)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.data_files import write_cifar10, write_mnist
from tests.flwr_harness import assert_completed, flwr_run

pytestmark = pytest.mark.flwr


def test_flwr_run_fedavg_cifar_mnist_on_fixture_files(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write_cifar10(root, 20, 5, seed=1)
    write_mnist(root, 20, 5, seed=2)
    run_dir = tmp_path / "run"
    config = {
        "method": "fedavg", "dataset": "cifar-mnist", "data-root": str(root), "partition": "source", "num-clients": 2,
        "model": "cnn", "num-server-rounds": 2, "local-steps": 2, "batch-size": 16, "run-dir": str(run_dir),
    }  # fmt: skip
    proc = flwr_run(tmp_path, config)
    assert_completed(proc, run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    for r in rows:
        assert r["clients"] == 2 and r["failures"] == 0 and r["bytes_up"] > 0
        # the global test set is 20 classes x 5 images (the fixture's 5 per class, below the 200 cap)
        assert abs(r["accuracy"] * 100 - round(r["accuracy"] * 100)) < 1e-6
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["dataset"] == "cifar-mnist" and saved["partition"] == "source"
    assert sorted(rows[0]["train_seconds"]) == ["0", "1"]
    # the FedPeWS CNN on 3x32x32 inputs with 20 classes: Linear(2048, 20) at the end
    with np.load(run_dir / "model.npz") as model:
        assert (20, 2048) in {model[k].shape for k in model.files}
