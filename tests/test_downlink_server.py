"""The server's downlink record (fedapp.downlink.server) without a federation: a node with no
record or another node id gets the full model, one that missed rounds exactly the tensors changed
since its round, and the digests match what the client computes (fedapp.downlink.digest)."""

from __future__ import annotations

import numpy as np
from flwr.app import Context, RecordDict

from fedapp.core import wire
from fedapp.core.state import ContextStore
from fedapp.downlink import cache
from fedapp.downlink.cache import BASE_DIGEST_KEY, BASE_KEY, DIGEST_KEY
from fedapp.downlink.digest import digest_of
from fedapp.downlink.server import Downlink, Held


def model(a: float, b: float, c: float) -> dict[str, np.ndarray]:
    return {"a": np.full(3, a, np.float32), "b": np.full((2, 2), b, np.float32), "c": np.array([c], np.float32)}


def test_full_then_changed_tensors_then_full_for_another_node_id() -> None:
    dl = Downlink("selected")
    rounds = {1: model(0, 0, 0), 2: model(1, 0, 0), 3: model(1, 2, 0)}
    records = {r: wire.to_record(m) for r, m in rounds.items()}
    dl.start_round(1, records[1], rounds[1])
    recs, cfg = dl.arrays_for(0, 100, records[1])
    assert list(recs) == ["arrays"] and recs["arrays"] is records[1]
    assert cfg == {DIGEST_KEY: digest_of(rounds[1]), BASE_KEY: 0, BASE_DIGEST_KEY: ""}
    assert dl.notes.full == {0: "no model sent yet"}
    dl.held[0] = Held(100, 1, digest_of(rounds[1]))
    dl.held[1] = Held(101, 1, digest_of(rounds[1]))
    dl.start_round(2, records[2], rounds[2])
    dl.start_round(3, records[3], rounds[3])  # partition 0 missed round 2
    recs, cfg = dl.arrays_for(0, 100, records[3])
    assert list(recs) == ["arrays"] and sorted(recs["arrays"].keys()) == ["a", "b"]  # changed since round 1 (every entry); c never did
    assert cfg == {DIGEST_KEY: digest_of(rounds[3]), BASE_KEY: 1, BASE_DIGEST_KEY: digest_of(rounds[1])}
    assert dl.notes.catch_up == {0: [1, 2]}
    recs, cfg = dl.arrays_for(1, 999, records[3])  # the partition is now served by another node (a restarted SuperNode)
    assert list(recs) == ["arrays"] and recs["arrays"] is records[3] and cfg[BASE_KEY] == 0 and dl.notes.full == {1: "node changed"}
    assert set(dl.history) == {1, 3}  # round 2's digests are no node's base: dropped


def test_entries_changed_bit_for_bit_travel_with_their_mask_and_rebuild_the_model() -> None:
    """A tensor of which few entries changed (one flipped to -0.0, equal to 0.0 as a number) goes as
    those entries and a packed mask; the node's cache plus them hashes to the server's digest."""
    old = {"w": np.zeros((40, 50), np.float32), "b": np.zeros(4, np.float32), "c": np.ones(3, np.float32)}
    new = {n: a.copy() for n, a in old.items()}
    new["w"][3, 7], new["w"][39, 0], new["w"][10, 10] = 2.5, -1.0, -0.0
    new["b"][:] = 1.0  # every entry: the whole tensor
    dl = Downlink("selected")
    dl.start_round(1, wire.to_record(old), old)
    dl.held[0] = Held(100, 1, digest_of(old))
    dl.start_round(2, wire.to_record(new), new)
    records, cfg = dl.arrays_for(0, 100, wire.to_record(new))
    assert sorted(records) == ["arrays", "arrays-mask"] and sorted(records["arrays"].keys()) == ["b", "w"]
    sent = wire.decode(records["arrays"], records["arrays-mask"], old, 1.0)
    assert sent.masks.keys() == {"w"} and np.flatnonzero(sent.masks["w"]).tolist() == [3 * 50 + 7, 10 * 50 + 10, 39 * 50]
    np.testing.assert_array_equal(sent.values["w"], np.array([2.5, -0.0, -1.0], np.float32))
    assert np.signbit(sent.values["w"][1])
    store = ContextStore(Context(run_id=1, node_id=100, node_config={}, state=RecordDict(), run_config={}))
    cache.assemble(store, 0, 1, {DIGEST_KEY: digest_of(old), BASE_KEY: 0}, old, old)
    rebuilt = cache.assemble(store, 0, 2, cfg, sent.values, old, sent.masks)
    assert digest_of(rebuilt) == digest_of(new) and np.signbit(rebuilt["w"][10, 10])
