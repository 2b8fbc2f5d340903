"""Roster: partition -> node mapping follows nodes that go offline and rejoin under new ids,
asking only nodes it has not seen (through the real ClientApp query handler, in-process)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from flwr.app import Context, Message, RecordDict

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


def grid(tmp_path: Path, n: int) -> CountingGrid:
    from client_app import app

    raw = full_config({"num-clients": 3, "run-dir": str(tmp_path)})
    return CountingGrid(app, raw, n, [{"tier": "low", "device-name": f"board-{p}"} for p in range(n)])


def test_discover_maps_partitions_and_keeps_device_facts(tmp_path: Path) -> None:
    g = grid(tmp_path, 3)
    roster = Roster(g, 3)
    roster.discover(5)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002}
    assert {k: v for k, v in roster.info[2].items() if k not in ("energy-meter", "device")} == {
        "partition-id": 2, "tier": "low", "device-name": "board-2", "num-partitions": 3,
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
    g = grid(tmp_path, 4)  # a fourth board serving partition 3 of a 3-client run
    roster = Roster(g, 3)
    roster.discover(5)
    roster.refresh(5)
    roster.refresh(5)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002}
    assert g.asked.count(1003) == 1
