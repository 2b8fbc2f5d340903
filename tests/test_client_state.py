"""Where client state lives: a node's state-dir (per run token) survives a SuperNode restart,
which in Flower means a new node id and an empty Context.state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flwr.app import Context, RecordDict

from fedapp.client.handlers import node_local, state_store
from fedapp.core.config import RunConfig
from fedapp.core.state import ContextStore, DiskStore


def context(node_id: int, node_config: dict[str, object]) -> Context:
    return Context(1, node_id, node_config, RecordDict(), {})  # type: ignore[arg-type]


def test_auto_uses_the_nodes_state_dir_per_run_token_and_survives_a_restart(tmp_path: Path) -> None:
    cfg = RunConfig(state_store="auto")
    nc = {"partition-id": 2, "state-dir": str(tmp_path / "node")}
    before = state_store(cfg, context(11, nc), "run-a")
    before.save(2, "flags", {"mask": np.array([True, False, True]), "stopped": np.array(1)})
    after = state_store(cfg, context(99, nc), "run-a")  # restarted: new node id, empty Context.state
    assert isinstance(after, DiskStore) and after.root == tmp_path / "node" / "run-a"
    loaded = after.load(2, "flags")
    np.testing.assert_array_equal(loaded["mask"], [True, False, True])
    assert int(loaded["stopped"]) == 1
    assert state_store(cfg, context(99, nc), "run-b").load(2, "flags") == {}  # another run starts clean


def test_auto_without_a_state_dir_keeps_state_in_the_context(tmp_path: Path) -> None:
    assert isinstance(state_store(RunConfig(state_store="auto"), context(1, {"partition-id": 0}), "t"), ContextStore)
    disk = state_store(RunConfig(state_store="disk", run_dir=str(tmp_path)), context(1, {"partition-id": 0}), "t")
    assert isinstance(disk, DiskStore) and disk.root == tmp_path / "client-state" / "t"
    nc = {"partition-id": 0, "state-dir": str(tmp_path)}
    assert isinstance(state_store(RunConfig(state_store="context"), context(1, nc), "t"), ContextStore)


def test_a_nodes_data_root_wins_over_the_run_config() -> None:
    cfg = RunConfig(data_root="/server/data")
    assert node_local(cfg, {"data-root": "/mnt/sd/data"}).data_root == "/mnt/sd/data"
    assert node_local(cfg, {"partition-id": 0}).data_root == "/server/data"
