"""Roster: partition -> node mapping follows nodes that go offline and rejoin under new ids,
asking only nodes it has not seen (through the real ClientApp query handler, in-process)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from flwr.app import Context, Message, RecordDict

from fedapp.config import ConfigError
from fedapp.device import describe, pick
from fedapp.engine.local_grid import LocalGrid
from fedapp.engine.run_local import full_config
from fedapp.roster import Roster


class CountingGrid(LocalGrid):
    """LocalGrid that remembers which nodes were sent a message."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.asked: list[int] = []

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        self.asked += [m.metadata.dst_node_id for m in messages]
        return super().send_and_receive(messages, timeout=timeout)


def grid(tmp_path: Path, n: int, num_clients: int = 3, partitions: int | None = None) -> CountingGrid:
    """``n`` boards; each says it is one of ``partitions`` (default: ``n``) in its node-config."""
    from fedapp.client_app import app

    raw = full_config({"num-clients": num_clients, "run-dir": str(tmp_path)})
    extra = {} if partitions is None else {"num-partitions": partitions}
    return CountingGrid(app, raw, n, [{"tier": "low", "device-name": f"board-{p}", **extra} for p in range(n)])


def test_discover_maps_partitions_and_keeps_device_facts(tmp_path: Path) -> None:
    g = grid(tmp_path, 3)
    roster = Roster(g, 3)
    roster.discover(5)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002}
    assert {k: v for k, v in roster.info[2].items() if k not in ("energy-meter", "device")} == {
        "partition-id": 2, "tier": "low", "device-name": "board-2", "num-partitions": 3, "state-store": "context",
    }  # fmt: skip
    assert roster.info[2]["device"] == describe(pick("auto"))  # the device the node trains on


def test_refresh_drops_offline_nodes_and_maps_a_restarted_node_by_asking_only_it(tmp_path: Path) -> None:
    g = grid(tmp_path, 3)
    roster = Roster(g, 3)
    roster.discover(5)
    g.asked.clear()
    assert roster.refresh(5) == {0: 1000, 1: 1001, 2: 1002} and g.asked == []  # nothing new: no query
    ctx = g.contexts.pop(1001)  # node of partition 1 goes offline
    assert roster.refresh(5) == {0: 1000, 2: 1002}
    g.contexts[2001] = Context(1, 2001, dict(ctx.node_config), RecordDict(), dict(ctx.run_config))  # back, new id
    assert roster.refresh(5) == {0: 1000, 1: 2001, 2: 1002}
    assert g.asked == [2001]


def test_nodes_outside_the_run_are_asked_once(tmp_path: Path) -> None:
    g = grid(tmp_path, 4, partitions=3)  # a misconfigured fourth board claiming partition 3 of a 3-client federation
    roster = Roster(g, 3)
    roster.discover(5)
    roster.refresh(5)
    roster.refresh(5)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002}
    assert g.asked.count(1003) == 1


def test_a_num_clients_the_nodes_contradict_fails_at_their_first_answer(tmp_path: Path) -> None:
    g = grid(tmp_path, 2, num_clients=3)  # two boards, each one of 2 partitions; the run asks for 3
    roster = Roster(g, 3)
    with pytest.raises(ConfigError, match=r"'num-clients' = 3, but node 1000 reports num-partitions = 2"):
        roster.discover(600)  # fails on the first answers, long before this timeout
    assert g.asked == [1000, 1001]  # one query round, no waiting


def test_num_clients_zero_takes_the_size_the_nodes_report(tmp_path: Path) -> None:
    g = grid(tmp_path, 4, num_clients=0)
    roster = Roster(g, 0)
    roster.discover(5)
    assert roster.num_clients == 4 and roster.nodes == {0: 1000, 1: 1001, 2: 1002, 3: 1003}


def test_nodes_that_disagree_on_the_size_fail_discovery(tmp_path: Path) -> None:
    g = grid(tmp_path, 3, num_clients=0)
    g.contexts[1002].node_config["num-partitions"] = 5
    with pytest.raises(ConfigError, match=r"node 1002 reports num-partitions = 5: the nodes disagree"):
        Roster(g, 0).discover(5)
