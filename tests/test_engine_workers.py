"""engine-workers: the in-process engine's client messages on Ray actors give the same rows, model and
client state as one process (client-batch 1), and a worker killed mid-round costs only its unfinished
messages. One local Ray for the module (its start-up is most of the time); every run starts its own actors."""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedapp.client.handlers import handle_train
from fedapp.core.config import ConfigError
from fedapp.engine.ray_workers import RayGrid
from fedapp.server import checkpoint
from fedapp.server.results import read_config, read_provenance
from fedapp.sim.run_local import full_config, run_local
from tests.client_apps import app_with_train
from tests.flwr_harness import ROOT
from tests.run_rows import outcome_rows
from tests.test_provenance import check_recorded

FEDAVG = {
    "dataset": "digits", "partition": "iid", "num-clients": 4, "num-server-rounds": 2, "local-steps": 4, "batch-size": 16,
    "mlp-hidden": "32",
}  # fmt: skip
FEDSELECT = {
    "method": "fedselect", "dataset": "digits", "partition": "shard", "num-clients": 5, "classes-per-client": 2,
    "samples-per-client": 10, "mlp-hidden": "32,32", "local-alt-epochs": 1, "batch-size": 10, "lr": 0.05,
    "personalized-eval": True, "fraction-train": 0.6, "num-server-rounds": 3,
}  # fmt: skip
FEDPEWS = {
    "method": "fedpews", "dataset": "digits", "partition": "0,2,4,6,8|1,3,5,7,9", "num-clients": 2, "mlp-hidden": "8,6",
    "num-server-rounds": 3, "warmup-fraction": 0.5, "lr": 0.05, "client-weighting": "uniform",
}  # fmt: skip
FEDPART = {
    "method": "fedpart", "dataset": "digits", "mlp-hidden": "16", "partition": "iid", "num-clients": 3, "optimizer": "adam",
    "lr": 0.001, "batch-size": 32, "local-steps": 2, "client-weighting": "uniform", "warmup-rounds": 1, "cycles": 1,
    "rounds-per-layer": 1, "full-rounds-between-cycles": 0, "num-server-rounds": 3,
}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray (2 CPUs) for the module; RayGrid joins it instead of starting its own."""
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
        yield
    finally:
        ray.shutdown()


def model_of(run: Path) -> dict[str, np.ndarray]:
    with np.load(run / "model.npz") as f:
        return {k: f[k] for k in f.files}


def client_files(run: Path) -> dict[str, dict[str, np.ndarray]]:
    """Each client-state file the checkpoint keeps (the in-process engine's Context.state), by name."""
    out = {}
    for path in sorted(checkpoint.client_state_dir(run).glob("*.npz")):
        with np.load(path) as f:
            out[path.name] = {k: f[k] for k in f.files}
    return out


def same_arrays(a: Any, b: Any) -> bool:
    if a.keys() != b.keys():
        return False
    return all(same_arrays(a[k], b[k]) if isinstance(a[k], dict) else np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("cfg", [FEDAVG, FEDSELECT, FEDPEWS, FEDPART], ids=["fedavg", "fedselect", "fedpews", "fedpart"])
def test_two_workers_give_the_rows_model_and_client_state_of_one_process(tmp_path: Path, cfg: dict[str, Any]) -> None:
    one = run_local({**cfg, "run-dir": str(tmp_path / "one")})
    two = run_local({**cfg, "run-dir": str(tmp_path / "two"), "engine-workers": 2})
    rows_two = outcome_rows(two)
    placed = [row.pop("engine_workers") for row in rows_two]
    assert rows_two == outcome_rows(one)
    assert same_arrays(model_of(one), model_of(two))
    assert same_arrays(client_files(one), client_files(two))
    recorded = read_provenance(two)  # what the workers reported: each node's data digest and versions, the commit
    assert recorded["engine"] == "in-process, Ray workers" and recorded["nodes"] == read_provenance(one)["nodes"]
    check_recorded(recorded, read_config(two), ROOT)
    if cfg is FEDSELECT:  # personal state exists, so the comparison above compared something
        assert client_files(one)
    raw = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    for row, where in zip(raw, placed, strict=True):  # each client that trained, on worker (its position) mod 2
        assert sorted(where) == sorted(row["train_seconds"]) and len(where) == row["clients"]
        assert all(w.split("@")[0] == str(int(p) % 2) for p, w in where.items())


BATCHED = {**FEDAVG, "num-clients": 6, "mlp-hidden": "16,12", "lr": 0.1, "client-batch": 8, "batch-fallback": "error"}


def test_each_worker_batches_its_share_within_the_batched_tolerance_of_one_process(tmp_path: Path) -> None:
    """client-batch 8 on 2 workers: each worker's batched executor trains its 3 clients as one chunk
    (one process: one chunk of 6); weights and metrics agree within the batched kernel's tolerance
    (docs/batched.md), and both agree with one-at-a-time training there too."""
    from tests.test_batched_engine import assert_close

    seq = run_local({**BATCHED, "client-batch": 1, "run-dir": str(tmp_path / "seq")})
    one = run_local({**BATCHED, "run-dir": str(tmp_path / "one")})
    two = run_local({**BATCHED, "run-dir": str(tmp_path / "two"), "engine-workers": 2})
    rows_one, rows_two = outcome_rows(one), outcome_rows(two)
    assert [r.pop("client_batch")["chunks"] for r in rows_one] == [[6], [6]]
    assert [r.pop("client_batch")["chunks"] for r in rows_two] == [[3, 3], [3, 3]]  # worker 0's then worker 1's
    placed = [{p: w.split("@")[0] for p, w in r.pop("engine_workers").items()} for r in rows_two]
    assert placed == [{str(p): str(p % 2) for p in range(6)}] * 2
    for got in (rows_two, outcome_rows(seq)):
        assert_close(rows_one, got, "rows")
    assert_close(model_of(one), model_of(two), "model")
    assert_close(model_of(seq), model_of(two), "model")


KILL_ROUND, KILLED = 2, 3


def kill_app() -> ClientApp:
    """The real ClientApp, except that partition KILLED's train message in round KILL_ROUND kills its worker process."""

    def _train(msg: Message, context: Context) -> Message:
        if context.node_config["partition-id"] == KILLED and msg.content["config"]["server-round"] == KILL_ROUND:  # type: ignore[index]
            os.kill(os.getpid(), signal.SIGKILL)
        return handle_train(msg, context)

    return app_with_train(_train)


APP = kill_app()


def test_a_worker_killed_mid_round_fails_its_unfinished_clients_and_the_run_goes_on(tmp_path: Path) -> None:
    from fedapp.server.loop import serve

    raw = full_config({**FEDAVG, "num-server-rounds": 3, "engine-workers": 2, "run-dir": str(tmp_path / "run")})
    grid = RayGrid(APP, raw, 4)
    try:
        first_pids = [s.pid for s in grid.slots]
        run = serve(grid, raw, base=tmp_path)
        later_pids = [s.pid for s in grid.slots]
    finally:
        grid.close()
    rows = outcome_rows(run)
    # worker 1 runs partitions 1 then 3; 3 kills it. Whether 1's reply reached the driver before the
    # worker died is Ray's timing (seen both ways): 3 always fails, 1 may, worker 0's clients never
    round_2 = rows[1]
    assert [(r["round"], r["clients"], r["failures"]) for r in (rows[0], rows[2])] == [(1, 4, 0), (3, 4, 0)]
    assert KILLED in round_2["failed_pids"] and set(round_2["failed_pids"]) <= {1, KILLED}
    assert round_2["clients"] + round_2["failures"] == 4 and round_2["failures"] == len(round_2["failed_pids"])
    assert all("engine worker 1" in why for why in round_2["failure_reasons"])
    assert {"0", "2"} <= set(round_2["engine_workers"]) and sorted(rows[2]["engine_workers"]) == ["0", "1", "2", "3"]
    assert later_pids[0] == first_pids[0] and later_pids[1] != first_pids[1]  # worker 1 replaced, worker 0 kept


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [("engine-workers", 0, "engine-workers"), ("engine-workers", "two", "'two'"), ("ray-address", "not an address", "not an address")],
)
def test_bad_engine_worker_keys_are_refused_naming_the_value(key: str, value: Any, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        run_local({**FEDAVG, key: value})


def test_more_workers_than_the_cluster_holds_is_refused_before_any_training(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"engine-workers = '3': 3 x 1 CPUs .* 2 CPUs"):
        run_local({**FEDAVG, "engine-workers": 3, "run-dir": str(tmp_path / "run")})
    assert not (tmp_path / "run").exists()
