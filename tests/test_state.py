"""Client state stores: what is saved is what is loaded, across store instances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from fedapp.core.state import ContextStore, DiskStore, StateError, StateStore, save_npz_atomic, unkeyed_files
from tests.memory_store import MemoryStore


def sample_state() -> dict[str, np.ndarray]:
    return {"scores": np.linspace(-1, 1, 7, dtype=np.float32), "mask": np.packbits([1, 0, 1, 1, 0, 0, 1, 0, 1]), "flag": np.array(1)}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].dtype == b[k].dtype


def test_disk_store_survives_a_new_instance_and_keeps_clients_apart(tmp_path: Path) -> None:
    DiskStore(tmp_path).save(3, "scores", sample_state())
    DiskStore(tmp_path).save(4, "scores", {"x": np.zeros(2)})
    assert_same(DiskStore(tmp_path / ".").load(3, "scores"), sample_state())
    assert DiskStore(tmp_path).load(5, "scores") == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["client-3.npz", "client-4.npz"]  # no temp files left


@pytest.mark.parametrize("make", ["memory", "context", "disk"])
def test_records_of_one_client_are_saved_and_replaced_independently(tmp_path: Path, make: str) -> None:
    ctx = Context(1, 7, {"partition-id": 0}, RecordDict(), {})
    stores: dict[str, StateStore] = {"memory": MemoryStore(), "context": ContextStore(ctx), "disk": DiskStore(tmp_path)}
    store = stores[make]
    store.save(0, "model", {"w": np.ones(3)})
    store.save_all(0, {"scores": sample_state(), "flags": {"seen": np.array(1)}})
    store.save(0, "model", {"w": np.zeros(2)})  # replaces the model record only
    assert_same(store.load(0, "model"), {"w": np.zeros(2)})
    assert_same(store.load(0, "scores"), sample_state())
    assert_same(store.load(0, "flags"), {"seen": np.array(1)})
    assert store.load(0, "other") == {} and store.load(1, "model") == {}
    with pytest.raises(ValueError, match="state key 'a/b'"):
        store.save(0, "a/b", {})


def test_a_state_file_of_an_older_fedapp_is_refused_naming_it(tmp_path: Path) -> None:
    save_npz_atomic(tmp_path / "client-2.npz", {"theta:fc.weight": np.zeros(2)})  # one unkeyed dict per client
    with pytest.raises(StateError, match=r"client-2.npz was written by an older fedapp .*'theta:fc.weight'"):
        DiskStore(tmp_path).load(2, "theta")
    assert (tmp_path / "client-2.npz").exists()  # kept: resuming with an older fedapp still can


def test_context_store_round_trips_through_context_state() -> None:
    ctx = Context(1, 7, {"partition-id": 0}, RecordDict(), {})
    ContextStore(ctx).save(0, "scores", sample_state())
    assert_same(ContextStore(ctx).load(0, "scores"), sample_state())
    assert ContextStore(ctx).load(1, "scores") == {}


def test_memory_store_returns_copies() -> None:
    store = MemoryStore()
    state = sample_state()
    store.save(0, "scores", state)
    state["scores"][:] = 9
    loaded = store.load(0, "scores")
    loaded["scores"][:] = 7
    assert_same(store.load(0, "scores"), sample_state())


def test_resuming_a_run_whose_client_state_an_older_fedapp_wrote_is_refused_before_training(tmp_path: Path) -> None:
    from fedapp.core.config import ConfigError
    from fedapp.server.checkpoint import client_state_dir
    from fedapp.sim.run_local import run_local

    run = {"method": "fedselect", "num-clients": 2, "num-server-rounds": 1, "local-steps": 1, "state-store": "disk"}
    out = run_local({**run, "run-dir": str(tmp_path / "r")})
    state = client_state_dir(out)
    assert unkeyed_files(state) == []
    save_npz_atomic(state / "client-1.npz", {"theta:1.weight": np.zeros(2), "round": np.array([1])})  # the older layout
    assert unkeyed_files(state) == [state / "client-1.npz"]
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match=r"resume=true: client state .*client-1.npz was written by an older fedapp"):
        run_local({**run, "num-server-rounds": 2, "run-dir": str(out), "resume": True})
    assert (out / "metrics.jsonl").read_text() == before  # nothing done is lost
