"""Client state stores: what is saved is what is loaded, across store instances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flwr.app import Context, RecordDict

from fedapp.state import ContextStore, DiskStore, MemoryStore


def sample_state() -> dict[str, np.ndarray]:
    return {"scores": np.linspace(-1, 1, 7, dtype=np.float32), "mask": np.packbits([1, 0, 1, 1, 0, 0, 1, 0, 1]), "flag": np.array(1)}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].dtype == b[k].dtype


def test_disk_store_survives_a_new_instance_and_keeps_clients_apart(tmp_path: Path) -> None:
    DiskStore(tmp_path).save(3, sample_state())
    DiskStore(tmp_path).save(4, {"x": np.zeros(2)})
    assert_same(DiskStore(tmp_path / ".").load(3), sample_state())
    assert DiskStore(tmp_path).load(5) == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["client-3.npz", "client-4.npz"]  # no temp files left


def test_context_store_round_trips_through_context_state() -> None:
    ctx = Context(1, 7, {"partition-id": 0}, RecordDict(), {})
    ContextStore(ctx).save(0, sample_state())
    assert_same(ContextStore(ctx).load(0), sample_state())
    assert ContextStore(ctx).load(1) == {}


def test_memory_store_returns_copies() -> None:
    store = MemoryStore()
    state = sample_state()
    store.save(0, state)
    state["scores"][:] = 9
    loaded = store.load(0)
    loaded["scores"][:] = 7
    assert_same(store.load(0), sample_state())
