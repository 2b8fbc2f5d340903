"""Roster: partition -> node mapping follows nodes that go offline and rejoin under new ids,
asking only nodes it has not seen (through the real ClientApp query handler, in-process), and
gives a partition only to the node registered for it once bindings are in force."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from flwr.app import Context, Message, RecordDict
from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=no-name-in-module

from fedapp.config import ConfigError
from fedapp.device import describe, pick
from fedapp.engine.local_grid import LocalGrid
from fedapp.engine.run_local import full_config
from fedapp.node_binding import binding_name, bound_partition
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


# -- partition bindings (the registered name, as the SuperLink's Runtime API reports it) ----------


class RegisteredGrid(CountingGrid):
    """Nodes carry registered names; node ``n`` is online from the ``joins[n]``-th look (default 1st)."""

    def __init__(self, *args: object, names: dict[int, str], joins: dict[int, int] | None = None, **kw: object) -> None:
        super().__init__(*args, **kw)
        self.names, self.joins, self.looks = names, joins or {}, 0

    def get_node_ids(self) -> list[int]:
        self.looks += 1
        return [n for n in self.contexts if self.joins.get(n, 1) <= self.looks]

    def get_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(node_id=n, name=self.names.get(n, "")) for n in self.get_node_ids()]


ROGUE = 1003


def rogue_grid(tmp_path: Path, names: dict[int, str], joins: dict[int, int]) -> RegisteredGrid:
    """Partitions 0..2 on nodes 1000..1002 and a fourth node (1003) whose node-config claims partition 0."""
    from fedapp.client_app import app

    raw = full_config({"num-clients": 3, "run-dir": str(tmp_path)})
    configs: list[dict[str, object]] = [{"num-partitions": 3} for _ in range(3)]
    configs.append({"partition-id": 0, "num-partitions": 3})
    return RegisteredGrid(app, raw, 4, configs, names=names, joins=joins)


HONEST = {1000 + p: binding_name(f"supernode-{p}", p) for p in range(3)}


@pytest.mark.parametrize(
    ("rogue_name", "why"),
    [
        (binding_name("spare", 5), "node 1003: claims partition-id 0, but it is registered for partition 5"),
        ("spare", "node 1003: claims partition-id 0, but its registration binds it to no partition (bindings are in force)"),
    ],
    ids=["registered for another partition", "registered without a binding"],
)
def test_a_rogue_answering_discovery_first_gets_no_partition_and_the_refusal_is_kept(tmp_path: Path, rogue_name: str, why: str) -> None:
    g = rogue_grid(tmp_path, {**HONEST, ROGUE: rogue_name}, joins={1000: 2})  # partition 0's own node comes online late
    roster = Roster(g, 3)
    roster.discover(5)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002}
    assert roster.take_refused() == [why] and roster.take_refused() == []
    roster.refresh(5)
    assert g.asked.count(ROGUE) == 1  # kept out for the run, not asked again


def test_without_bindings_the_first_claimant_still_wins(tmp_path: Path) -> None:
    """Simulation and unbound deployments keep the rule of first claim (what bindings exist to close)."""
    g = rogue_grid(tmp_path, {}, joins={1000: 2})
    roster = Roster(g, 3)
    roster.discover(5)  # complete before partition 0's own node is online
    assert roster.refresh(5) == {0: ROGUE, 1: 1001, 2: 1002}
    assert roster.take_refused() == ["node 1000: claims partition-id 0, which online node 1003 serves"]


@pytest.mark.parametrize("lie", [{"num-partitions": 7}, {"device": "cuda:99"}], ids=["size", "device error"])
def test_a_rogue_registered_elsewhere_neither_sizes_nor_stops_the_run(tmp_path: Path, lie: dict[str, int | str]) -> None:
    """Its answer counts for nothing: not the size of a num-clients = 0 run, not a device error that
    would stop discovery."""
    g = rogue_grid(tmp_path, {**HONEST, ROGUE: binding_name("spare", 5)}, joins={})
    g.contexts[ROGUE].node_config.update(lie)
    roster = Roster(g, 0)
    roster.discover(5)
    assert (roster.num_clients, roster.nodes) == (3, {0: 1000, 1: 1001, 2: 1002})
    assert roster.take_refused() == ["node 1003: claims partition-id 0, but it is registered for partition 5"]


def test_a_partition_taken_before_bindings_were_seen_is_taken_back(tmp_path: Path) -> None:
    g = rogue_grid(tmp_path, {**HONEST, ROGUE: "spare"}, joins={1000: 3, 1001: 2, 1002: 3})  # the unbound rogue alone first
    roster = Roster(g, 3)
    roster.discover(5)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002}
    assert roster.take_refused() == [
        "node 1003: claims partition-id 0, but its registration binds it to no partition (bindings are in force); partition taken back"
    ]


def test_two_nodes_registered_for_one_partition_keep_the_online_rule_and_are_reported_every_refresh(tmp_path: Path) -> None:
    g = rogue_grid(tmp_path, {**HONEST, ROGUE: binding_name("replacement", 0)}, joins={})
    roster = Roster(g, 3)
    roster.discover(5)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002}
    refused = ["node 1003: claims partition-id 0, which online node 1000 serves"]
    assert roster.take_refused() == refused
    assert roster.refresh(5) == {0: 1000, 1: 1001, 2: 1002} and roster.take_refused() == refused  # asked again, refused again
    del g.contexts[1000]  # partition 0's node goes offline: the other node registered for it takes over
    assert roster.refresh(5) == {0: ROGUE, 1: 1001, 2: 1002} and roster.take_refused() == []


def test_a_claimant_refused_at_every_look_of_a_long_discovery_is_reported_once(tmp_path: Path) -> None:
    g = rogue_grid(tmp_path, {}, joins={1002: 4})  # partition 2's node is late: discovery looks four times
    roster = Roster(g, 3)
    roster.discover(10)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002} and g.asked.count(ROGUE) == 4
    assert roster.take_refused() == ["node 1003: claims partition-id 0, which online node 1000 serves"]


def test_a_claim_outside_the_run_is_logged_and_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    g = grid(tmp_path, 4, partitions=3)
    roster = Roster(g, 3)
    roster.discover(5)
    assert roster.take_refused() == ["node 1003: claims partition-id 3, outside this run's 0..2"]
    assert "node 1003 kept out: claims partition-id 3" in caplog.text


@pytest.mark.parametrize(
    ("name", "partition"),
    [
        ("supernode-0:partition-0", 0), ("partition-7", 7), ("a:b:partition-12", 12), ("supernode-3", None), ("", None),
        (None, None), ("partition-01", None), ("partition--1", None), ("partition-3:x", None), ("partition-1 ", None),
        ("partition-" + "9" * 10, None),
    ],
)  # fmt: skip
def test_a_registered_name_binds_exactly_the_partition_it_names(name: str | None, partition: int | None) -> None:
    assert bound_partition(name) == partition
    if partition is not None:
        assert bound_partition(binding_name("label", partition)) == partition
