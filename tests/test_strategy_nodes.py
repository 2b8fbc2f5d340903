"""The strategy owns its nodes, its client-sampling random state and its step bound's scale: it asks
its node source anew before every round but its first, goes on from a given sampling state (a
resumed run) and keeps a given scale (the initial model's, on resume too)."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedapp.core import wire
from fedapp.methods.base import ServerPolicy
from fedapp.methods.registry import resolve
from fedapp.server.strategy import MaskedStrategy, RoundResult
from fedapp.sim.run_local import full_config

W0 = {"w": np.zeros(3, np.float32)}


def strategy(nodes: dict[int, int], **kwargs: object) -> MaskedStrategy:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1  # type: ignore[misc]
    cfg = resolve(full_config({"num-clients": 6, "fraction-train": 0.5}))[0]
    return MaskedStrategy(cfg, ServerPolicy(cfg, None, W0, {}, torch.nn.Linear(1, 1)), nodes, **kwargs)  # type: ignore[arg-type]


def sent_to(s: MaskedStrategy, rnd: int) -> list[int]:
    return sorted(m.metadata.dst_node_id for m in s.configure_train(rnd, wire.to_record(W0), ConfigRecord({}), None))  # type: ignore[arg-type]


def test_the_strategy_refreshes_its_nodes_before_every_round_but_its_first() -> None:
    calls: list[int] = []
    later = {0: 100, 1: 101}  # partitions 2..5 went offline, 0 and 1 came back on other nodes

    def refresh() -> dict[int, int]:
        calls.append(1)
        return later

    s = strategy({p: 10 + p for p in range(6)}, refresh=refresh)
    first = sent_to(s, 1)
    assert calls == [] and len(first) == 3 and set(first) <= {10, 11, 12, 13, 14, 15}
    second = sent_to(s, 2)
    assert len(second) == 1 and set(second) <= {100, 101} and calls == [1]  # half of the 2 nodes it now has
    assert s.nodes == later


def test_the_strategy_goes_on_from_a_given_sampling_state() -> None:
    nodes = {p: 10 + p for p in range(6)}
    a = strategy(nodes)
    sent_to(a, 1)
    state = a.sampling_state()
    picks = [sent_to(a, r) for r in (2, 3, 4)]
    b = strategy(nodes, sampling=state)  # a resumed run: its first round draws as the run's next one
    assert [sent_to(b, r) for r in (2, 3, 4)] == picks
    fresh = strategy(nodes)  # from the seed instead: other draws (the state above is not the seed's)
    assert [sent_to(fresh, r) for r in (2, 3, 4)] != picks


def test_the_step_bound_keeps_the_scale_it_was_given_over_the_global_model_it_is_sent() -> None:
    """A resumed run's strategy is given the initial model's scale (1 for W0 = 0); the global it
    goes on from has grown to 1e3, whose own scale (1e3) would let a 2e4 step through (bound 1e4 x scale)."""
    grown = {"w": np.full(3, 1e3, np.float32)}

    def outcome(**kwargs: object) -> RoundResult:
        s = strategy({p: 10 + p for p in range(6)}, **kwargs)
        sent = list(s.configure_train(1, wire.to_record(grown), ConfigRecord({}), None))  # type: ignore[arg-type]
        pid = next(p for p, n in s.sent_nodes.items() if n == sent[0].metadata.dst_node_id)
        metrics = MetricRecord({"partition-id": pid, "num-examples": s.sizes[pid].train})
        values = wire.to_record({"w": grown["w"] + np.float32(2e4)})
        return s.aggregate_train(1, [Message(RecordDict({"values": values, "metrics": metrics}), reply_to=sent[0])])

    refused = outcome(scale={"w": 1.0})
    assert refused.stats.clients == 0 and "more than 10000 x the tensor's scale 1" in refused.stats.reasons[0]
    assert refused.arrays is None and refused.values is None
    taken = outcome()  # without it: the scale of the global it was sent; the one reply is the new model
    assert taken.stats.clients == 1 and taken.arrays is not None and taken.values is not None
    for got in (taken.values["w"], wire.from_record(taken.arrays)["w"]):  # the numpy arrays are what the record holds
        assert got.dtype == np.float32 and got.tolist() == [21000.0] * 3
