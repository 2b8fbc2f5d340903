"""fedapp.load_model round-trips: the loaded model scores on the global test set exactly the
accuracy and loss of the run's last metrics row; load_client_model gives a personalised
client its own stored model (FedPer: the personal head differs from the global one)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import fedapp
from fedapp.core.device import host_arrays
from fedapp.core.evaluate import evaluate
from fedapp.data import dataset_for
from fedapp.load import client_records, run_config
from fedapp.sim.run_local import run_local

RUN = {"dataset": "digits", "num-clients": 2, "partition": "iid", "lr": 0.2, "local-steps": 2, "num-server-rounds": 2}


def last_row(run: Path) -> dict[str, float]:
    return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])


def global_scores(model: torch.nn.Module, run: Path) -> tuple[float, float]:
    ds = dataset_for(run_config(run))
    return evaluate(model, torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test), prepare=ds.norm.tensor if ds.norm else None)


def test_load_model_scores_the_runs_final_accuracy(tmp_path: Path) -> None:
    run = run_local({**RUN, "run-dir": str(tmp_path / "run")})
    model = fedapp.load_model(run)
    acc, loss = global_scores(model, run)
    row = last_row(run)
    assert acc == row["accuracy"] and loss == pytest.approx(row["loss"], rel=1e-6, abs=0)
    with np.load(run / "model.npz") as saved:
        assert all(np.array_equal(saved[k], v) for k, v in host_arrays(model.state_dict()).items())
    with pytest.raises(FileNotFoundError, match=r"no state kept for partition 0"):  # FedAvg clients keep no state
        fedapp.load_client_model(run, 0)


def test_load_client_model_lays_a_clients_personal_model_over_the_global_one(tmp_path: Path) -> None:
    run = run_local({**RUN, "method": "fedper", "run-dir": str(tmp_path / "run")})
    global_model = fedapp.load_model(run)
    for pid in (0, 1):
        theta = client_records(run, pid)["theta"]
        mine = host_arrays(fedapp.load_client_model(run, pid).state_dict())
        assert set(mine) == set(theta) and all(np.array_equal(mine[k], theta[k]) for k in theta)
    g, c0, c1 = (host_arrays(m.state_dict()) for m in (global_model, fedapp.load_client_model(run, 0), fedapp.load_client_model(run, 1)))
    differ = sorted(k for k in g if not np.array_equal(g[k], c0[k]))
    assert differ and any(not np.array_equal(c0[k], c1[k]) for k in differ)  # each client's own head
    with pytest.raises(FileNotFoundError, match=r"no state kept for partition 7"):
        fedapp.load_client_model(run, 7)
