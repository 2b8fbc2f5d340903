"""The server's downlink record (fedapp.downlink.server) without a federation: a node with no
record or another node id gets the full model, one that missed rounds exactly the tensors changed
since its round, and the digests match what the client computes (fedapp.downlink.digest)."""

from __future__ import annotations

import numpy as np

from fedapp.core import wire
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
    rec, cfg = dl.arrays_for(0, 100, records[1])
    assert rec is records[1] and cfg == {DIGEST_KEY: digest_of(rounds[1]), BASE_KEY: 0, BASE_DIGEST_KEY: ""}
    assert dl.notes.full == {0: "no model sent yet"}
    dl.held[0] = Held(100, 1, digest_of(rounds[1]))
    dl.held[1] = Held(101, 1, digest_of(rounds[1]))
    dl.start_round(2, records[2], rounds[2])
    dl.start_round(3, records[3], rounds[3])  # partition 0 missed round 2
    rec, cfg = dl.arrays_for(0, 100, records[3])
    assert sorted(rec.keys()) == ["a", "b"]  # changed since round 1; c never did
    assert cfg == {DIGEST_KEY: digest_of(rounds[3]), BASE_KEY: 1, BASE_DIGEST_KEY: digest_of(rounds[1])}
    assert dl.notes.catch_up == {0: [1, 2]}
    rec, cfg = dl.arrays_for(1, 999, records[3])  # the partition is now served by another node (a restarted SuperNode)
    assert rec is records[3] and cfg[BASE_KEY] == 0 and dl.notes.full == {1: "node changed"}
    assert set(dl.history) == {1, 3}  # round 2's digests are no node's base: dropped
