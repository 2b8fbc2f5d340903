"""Integration: `flwr run` of FedAvg on cifar-mnist built from generated CIFAR-10 pickles
and MNIST IDX files, one source per client (the FedPeWS CIFAR-MNIST setting)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.data_files import write_cifar10, write_mnist
from tests.flwr_harness import flwr_run

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
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2]
    for r in rows:
        assert r["clients"] == 2 and r["failures"] == 0 and r["bytes_up"] > 0
        # accuracy is over the 200-image test set (20 classes x 10 CIFAR / 5... capped per class): a multiple of 1/200
        assert abs(r["accuracy"] * 200 - round(r["accuracy"] * 200)) < 1e-6
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["dataset"] == "cifar-mnist" and saved["partition"] == "source"
    # each client trained on its own source: 200 MNIST and 200 CIFAR training images
    assert sorted(rows[0]["train_seconds"]) == ["0", "1"]
