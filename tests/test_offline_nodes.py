"""A node that goes offline mid-run: the next round trains the nodes still online, for every
method, the tiered ones (FjORD, FedDrop, FedSPU) included. A FjORD fleet run whose nodes stopped
heartbeating died with ``KeyError: 0``: its sampler drew from the partitions found at discovery,
not from the roster's online ones, and the strategy had no node for partition 0."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path

import pytest
from flwr.app import Message, MessageType

from fedapp.client_app import app
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.early_stop import EarlyStopping
from fedapp.server.loop import serve
from fedapp.sim.run_local import full_config

BASE = {
    "dataset": "digits", "num-clients": 3, "partition": "0,1,2,3|4,5,6|7,8,9", "num-server-rounds": 2,
    "local-steps": 2, "batch-size": 16, "lr": 0.3, "mlp-hidden": "16",
}  # fmt: skip
GONE = 1000  # partition 0's node


class LeavingGrid(LocalGrid):
    """Partition 0's node goes offline once round 1's training is done (before any evaluate message)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.sent: list[tuple[str, int, int]] = []  # (message type, round, node) of every task sent

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        for m in messages:
            if m.metadata.message_type in (MessageType.TRAIN, MessageType.EVALUATE):
                self.sent.append((m.metadata.message_type, int(m.metadata.group_id), m.metadata.dst_node_id))
        replies = super().send_and_receive(messages, timeout=timeout)
        if any(m.metadata.message_type == MessageType.TRAIN for m in messages):
            self.contexts.pop(GONE, None)
        return replies


@pytest.mark.parametrize("method", ["fedavg", "fjord", "feddrop", "fedspu"])
def test_the_round_after_a_node_went_offline_trains_the_nodes_still_online(tmp_path: Path, method: str) -> None:
    raw = full_config({**BASE, "method": method, "run-dir": str(tmp_path / "run")})
    grid = LeavingGrid(app, raw, 3)
    out = serve(grid, raw, discovery_timeout=5)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["round"], r["clients"], r["failures"], r["failed_pids"]) for r in rows] == [(1, 3, 0, []), (2, 2, 0, [])]
    trained = [(rnd, node) for kind, rnd, node in grid.sent if kind == MessageType.TRAIN]
    assert trained == [(1, 1000), (1, 1001), (1, 1002), (2, 1001), (2, 1002)]
    if method == "fjord":  # round 1's scores come with round 2's messages: the evaluate message to the node just gone fails
        assert [r.get("eval_failures") for r in rows] == [1, None]
        assert [r["evaluated_clients"] for r in rows] == [2, 2]
    elif method != "fedavg":  # FedSPU, FedDrop: each client scored its trained model in its round-1 reply, before it left
        assert [r.get("eval_failures") for r in rows] == [None, None]
        assert [r["evaluated_clients"] for r in rows] == [3, 2]
        assert not [s for s in grid.sent if s[0] == MessageType.EVALUATE]
    if method != "fedavg":
        assert sorted(rows[1]["client_active_fraction"]) == ["1", "2"]


def test_early_stopping_samples_only_online_clients_and_draws_as_before_when_all_are() -> None:
    es = EarlyStopping([0, 1, 2, 3], per_round=2, enabled=False)
    assert [es.select(r, random.Random(r), online=[1, 3]) for r in range(5)] == [[1, 3]] * 5
    assert es.select(5, random.Random(5), online=[2]) == [2] and es.first_short_round is None  # offline is not stopped
    assert es.select(6, random.Random(6), online=[]) == []
    everyone = [es.select(r, random.Random(r), online=[0, 1, 2, 3]) for r in range(5)]
    assert everyone == [sorted(random.Random(r).sample([0, 1, 2, 3], 2)) for r in range(5)]
