"""FedSelect's edge cases and the pFL baselines, end to end in-process (run_local)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array

from fedapp.core.state import DiskStore
from fedapp.methods.personal import THETA
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.server.checkpoint import client_state_dir
from fedapp.sim.run_local import full_config, run_local

BASE = {
    "num-clients": 5, "partition": "shard", "classes-per-client": 2, "samples-per-client": 10, "num-server-rounds": 3,
    "batch-size": 10, "local-epochs": 3, "local-alt-epochs": 3, "client-weighting": "uniform",
}  # fmt: skip
BODY = [("1.weight", 4096), ("1.bias", 64), ("3.weight", 4096), ("3.bias", 64)]


def run(tmp: Path, name: str, **overrides: Any) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    out = run_local({**BASE, "run-dir": str(tmp / name), **overrides})
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    with np.load(out / "model.npz") as z:
        return rows, {k: z[k] for k in z.files}


def test_fedselect_with_limit_zero_is_fedavg(tmp_path: Path) -> None:
    sel_rows, sel_model = run(tmp_path, "sel", method="fedselect", **{"personal-limit": 0.0})
    avg_rows, avg_model = run(tmp_path, "avg", method="fedavg")
    for k in avg_model:
        np.testing.assert_array_equal(sel_model[k], avg_model[k])
    assert [r["bytes_up"] for r in sel_rows] == [r["bytes_up"] for r in avg_rows]
    assert all(r["personal_fraction"] == 0.0 for r in sel_rows)


def test_local_sends_nothing_and_fedavg_reports_its_global_model_per_client(tmp_path: Path) -> None:
    rows, _ = run(tmp_path, "local", method="local")
    assert all(r["bytes_up"] == 0 and r["bytes_down"] == 0 and r["personal_fraction"] == 1.0 for r in rows)
    assert rows[-1]["personalized_accuracy"] > 0.5  # 2-class local tasks are learnable from 10 samples
    assert rows[0]["accuracy"] == rows[-1]["accuracy"]  # the server's model never moves

    avg_rows, _ = run(tmp_path, "avg", method="fedavg", **{"personalized-eval": True})
    for r in avg_rows:
        assert r["evaluated_clients"] == 5
        assert r["personalized_accuracy_min"] <= r["personalized_accuracy"] <= r["personalized_accuracy_max"]
    ft_rows, ft_model = run(tmp_path, "ft", method="fedavg-ft")
    _, avg_model = run(tmp_path, "avg2", method="fedavg")
    for k in avg_model:  # fine-tuning happens on copies at evaluation: training is FedAvg's
        np.testing.assert_array_equal(ft_model[k], avg_model[k])
    assert [r["personalized_accuracy"] for r in ft_rows] != [r["personalized_accuracy"] for r in avg_rows]


def test_fedper_uploads_the_body_and_keeps_the_head(tmp_path: Path) -> None:
    rows, model = run(tmp_path, "per", method="fedper", **{"state-store": "disk"})
    # MLP 64-64-64-10: the head (5.weight, 5.bias) is 650 of 2 x 4,160 + 650 = 8,970 parameters
    assert all(abs(r["personal_fraction"] - 650 / 8970) < 1e-12 for r in rows)
    heads = [DiskStore(client_state_dir(tmp_path / "per")).load(p, THETA)["5.weight"] for p in range(5)]
    assert not np.array_equal(heads[0], heads[1])
    init = build_model(resolve(full_config(BASE))[0], (1, 8, 8), 10, seed=0).state_dict()
    np.testing.assert_array_equal(model["5.weight"], init["5.weight"].numpy())  # never uploaded, never averaged
    assert not np.array_equal(model["3.weight"], init["3.weight"].numpy())
    assert rows[0]["bytes_up"] == rows[-1]["bytes_up"] == 5 * sum(len(Array(np.zeros(n, np.float32)).data) + len(k) for k, n in BODY)
