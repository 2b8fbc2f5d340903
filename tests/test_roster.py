"""Roster: partition -> node mapping follows nodes that go offline and rejoin under new ids,
asking only nodes it has not seen (through the real ClientApp query handler, in-process), and
gives a partition only to the node registered for it once bindings are in force."""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=no-name-in-module

from fedapp.core.config import ConfigError
from fedapp.core.device import describe, pick
from fedapp.engine.local_grid import LocalGrid
from fedapp.server.node_binding import binding_name, bound_partition
from fedapp.server.roster import MAX_FACT_CHARS, MAX_FACTS, BadAnswer, Roster, facts_of
from fedapp.sim.run_local import full_config


class CountingGrid(LocalGrid):
    """LocalGrid that remembers which nodes were sent a message (with each message's TTL, and each call's timeout)."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.asked: list[int] = []
        self.ttls: list[float] = []
        self.timeouts: list[float | None] = []

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        self.asked += [m.metadata.dst_node_id for m in messages]
        self.ttls += [m.metadata.ttl for m in messages]
        self.timeouts.append(timeout)
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
        **{f"version-{p}": importlib.metadata.version(p) for p in ("fedapp", "flwr", "torch", "torchvision", "numpy")},
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


def test_boards_numbered_from_one_fail_discovery_naming_the_board_kept_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Three boards given --partition-id 1, 2, 3 of --num-partitions 3: partition 0 has no node, and the
    error says why the third board serves nothing (not only that partition 0 is missing)."""
    from fedapp.client_app import app

    raw = full_config({"num-clients": 3, "run-dir": str(tmp_path)})
    g = CountingGrid(app, raw, 3, [{"partition-id": p + 1, "num-partitions": 3} for p in range(3)])
    roster = Roster(g, 0)
    with pytest.raises(ConfigError) as err:
        roster.discover(1)
    assert roster.nodes == {1: 1000, 2: 1001}
    assert "no node holds partition-id(s) [0] (2 node(s) found; node 1002 kept out: claims partition-id 3, outside this run's 0..2)" in str(
        err.value
    )
    assert caplog.text.count("node 1002 kept out: claims partition-id 3, outside this run's 0..2") == 1  # logged once, asked once


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


# -- one answer, one rule at a time --------------------------------------------------------------


def answer(info: ConfigRecord | MetricRecord | None) -> Message:
    """A discovery answer whose content holds ``info`` under "info" (none at all for None)."""
    content = RecordDict({"info": info}) if info is not None else RecordDict()
    return Message(content, dst_node_id=1, message_type=MessageType.QUERY)


def test_facts_of_takes_a_whole_partition_id_and_bounded_facts(tmp_path: Path) -> None:
    grid(tmp_path, 1)  # a LocalGrid sets Flower's task identity, which a Message needs
    facts: dict[str, Any] = {"partition-id": 2, "tier": "low", **{f"k{i}": i for i in range(MAX_FACTS - 2)}}
    assert facts_of(answer(ConfigRecord(facts))) == (2, facts)  # exactly MAX_FACTS entries
    edge: dict[str, Any] = {
        "partition-id": 0,
        "x" * MAX_FACT_CHARS: "y" * MAX_FACT_CHARS,
        "b": b"z" * MAX_FACT_CHARS,
        "l": ["w"] * MAX_FACT_CHARS,
    }
    assert facts_of(answer(ConfigRecord(edge)))[0] == 0  # every length exactly at the bound
    bad: list[tuple[ConfigRecord | MetricRecord | None, str]] = [
        (None, "no 'info' ConfigRecord (got NoneType)"),
        (MetricRecord({"partition-id": 1}), "no 'info' ConfigRecord (got MetricRecord)"),
        (ConfigRecord({**facts, "one-more": 1}), f"{MAX_FACTS + 1} facts, more than {MAX_FACTS}"),
        (ConfigRecord({"partition-id": 0, "k" * (MAX_FACT_CHARS + 1): 1}), f"fact '{'k' * 40}' is longer than {MAX_FACT_CHARS}"),
        (ConfigRecord({"partition-id": 0, "s": "v" * (MAX_FACT_CHARS + 1)}), f"fact 's' is longer than {MAX_FACT_CHARS}"),
        (ConfigRecord({"partition-id": 0, "b": b"v" * (MAX_FACT_CHARS + 1)}), f"fact 'b' is longer than {MAX_FACT_CHARS}"),
        (ConfigRecord({"partition-id": 0, "l": [1] * (MAX_FACT_CHARS + 1)}), f"fact 'l' is longer than {MAX_FACT_CHARS}"),
        (ConfigRecord({"partition-id": True}), "partition-id = True is not an integer"),
        (ConfigRecord({"partition-id": 1.0}), "partition-id = 1.0 is not an integer"),
        (ConfigRecord({"tier": "low"}), "partition-id = None is not an integer"),
        (ConfigRecord({"partition-id": "p" * 60}), "partition-id = '" + "p" * 39 + " is not an integer"),  # quoted, cut at 40
    ]
    for info, why in bad:
        with pytest.raises(BadAnswer) as err:
            facts_of(answer(info))
        assert str(err.value) == why


def test_the_size_comes_from_a_usable_num_partitions_and_is_checked_only_until_discovered(tmp_path: Path) -> None:
    roster = Roster(grid(tmp_path, 1), 0)
    for unusable in (True, 0, -2, 3.0, "3"):
        roster.size_from(1000, {"num-partitions": unusable})
        assert roster.num_clients == 0, unusable
    roster.size_from(1000, {"num-partitions": 1})
    assert roster.num_clients == 1 and not roster.stated
    roster.size_from(1001, {"num-partitions": 1})  # agrees
    with pytest.raises(
        ConfigError, match=r"^the other nodes report num-partitions = 1, but node 1001 reports num-partitions = 4: the nodes disagree$"
    ):
        roster.size_from(1001, {"num-partitions": 4})
    roster.discovered = True
    roster.size_from(1001, {"num-partitions": 4})  # mid-run: no longer checked
    assert roster.num_clients == 1
    stated = Roster(grid(tmp_path, 1), 3)
    with pytest.raises(ConfigError) as err:
        stated.size_from(1002, {"num-partitions": 2})
    assert str(err.value) == (
        "run-config key 'num-clients' = 3, but node 1002 reports num-partitions = 2: set num-clients to the federation's size, "
        'or 0 to take it from the nodes (in simulation: --federation-config "num-supernodes=3")'
    )
    with pytest.raises(ConfigError, match=r"^run-config key 'num-clients' = 1, but node 1002 reports num-partitions = 2: set num-clients"):
        Roster(grid(tmp_path, 1), 1).size_from(1002, {"num-partitions": 2})  # one stated client is stated too


def test_place_keeps_partitions_inside_the_run_and_refusals_are_reported_once_in_order(tmp_path: Path) -> None:
    roster = Roster(grid(tmp_path, 1), 2)
    roster.place(7, -1, {}, None)
    roster.place(8, 2, {}, None)
    roster.place(9, 1, {"tier": "x"}, None)
    roster.place(10, 1, {}, {9, 10})  # partition 1's node is online: refused, asked again later
    roster.place(10, 1, {}, {9, 10})
    assert roster.nodes == {1: 9} and roster.info == {1: {"tier": "x"}}
    assert roster.strangers == {7, 8}  # the online-rule refusal is no stranger
    assert roster.take_refused() == [
        "node 7: claims partition-id -1, outside this run's 0..1",
        "node 8: claims partition-id 2, outside this run's 0..1",
        "node 10: claims partition-id 1, which online node 9 serves",
    ]
    assert roster.take_refused() == []
    roster.place(10, 1, {}, {10})  # node 9 went offline: node 10 takes over
    roster.place(9, 1, {}, None)  # without the online set, a held partition is never taken
    assert roster.nodes == {1: 10} and roster.take_refused() == ["node 9: claims partition-id 1, which online node 10 serves"]
    roster.bound, roster.bindings = True, {11: 0, 12: None}  # bindings in force (a node placed after waiting for the size)
    roster.place(11, 1, {}, None)
    roster.place(12, 0, {}, None)
    roster.place(11, 0, {}, None)
    assert roster.nodes == {0: 11, 1: 10} and roster.take_refused() == [
        "node 11: claims partition-id 1, but it is registered for partition 0",
        "node 12: claims partition-id 0, but its registration binds it to no partition (bindings are in force)",
    ]


def test_discovery_that_times_out_names_what_is_missing(tmp_path: Path) -> None:
    g = grid(tmp_path, 2, num_clients=3, partitions=3)  # partition 2 has no node
    with pytest.raises(ConfigError) as err:
        Roster(g, 3).discover(0)
    assert str(err.value) == (
        "run-config key 'num-clients' = 3, but after 0s (discovery-timeout) no node holds partition-id(s) [2] (2 node(s) found). "
        'In simulation pass --federation-config "num-supernodes=3".'
    )
    for ctx in g.contexts.values():
        del ctx.node_config["num-partitions"]  # older nodes: no size to take
    with pytest.raises(ConfigError) as err:
        Roster(g, 0).discover(0)
    assert str(err.value) == (
        "run-config key 'num-clients' = 0 takes the size from the nodes' num-partitions, but after 0s (discovery-timeout) "
        "no node reported one (2 answered); set num-clients"
    )


def test_a_query_waits_at_least_a_second_and_a_node_that_did_not_answer_is_asked_again_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    g = grid(tmp_path, 1, num_clients=1)
    roster = Roster(g, 1)
    roster.query([4242, 1000], 0.25)  # 4242: no such node, its reply is an error (and the next answer still counts)
    assert roster.nodes == {0: 1000}  # the answer after the error still counts
    roster.query([1000], 30)
    assert g.ttls == [1.0, 1.0, 30.0] and g.timeouts == [1.0, 30.0]
    assert "node 4242 did not answer discovery: no node 4242" in caplog.text
    assert roster.nodes == {0: 1000} and roster.strangers == set() and roster.take_refused() == []


class LyingGrid(CountingGrid):
    """Node ``n``'s discovery answer replaced by ``lies[n]`` (what a broken or hostile node could send)."""

    def __init__(self, *args: object, lies: dict[int, ConfigRecord], **kw: object) -> None:
        super().__init__(*args, **kw)
        self.lies = lies

    def _deliver(self, msg: Message) -> Message:
        reply = super()._deliver(msg)
        lie = self.lies.get(msg.metadata.dst_node_id)
        if lie is not None:
            reply.content["info"] = lie
        return reply


def lying_grid(tmp_path: Path, lies: dict[int, ConfigRecord], n: int = 3) -> LyingGrid:
    from fedapp.client_app import app

    raw = full_config({"num-clients": n, "run-dir": str(tmp_path)})
    return LyingGrid(app, raw, n, [{"num-partitions": n} for _ in range(n)], lies=lies)


def test_an_unusable_answer_or_a_node_error_keeps_that_node_out_and_the_others_are_still_placed(tmp_path: Path) -> None:
    lies = {1000: ConfigRecord({"partition-id": 1.5}), 1001: ConfigRecord({"partition-id": 1, "energy-error": "no meter"})}
    roster = Roster(lying_grid(tmp_path, lies), 3)
    with pytest.raises(ConfigError) as err:  # before discovery: the run asked for a meter the node lacks
        roster.query([1000, 1001, 1002], 1)
    assert str(err.value) == "node 1001: no meter"
    lies[1001] = ConfigRecord({"partition-id": 1, "device-error": "no cuda:3", "energy-error": "no meter"})
    roster = Roster(lying_grid(tmp_path, lies), 3)
    roster.discovered = True  # mid-run: only that node is kept out
    roster.query([1000, 1001, 1002], 1)
    assert roster.nodes == {2: 1002} and roster.strangers == {1000, 1001}
    assert roster.take_refused() == [
        "node 1000: discovery answer unusable (BadAnswer: partition-id = 1.5 is not an integer)",
        "node 1001: no cuda:3",  # the device error first
    ]


def test_a_claim_refused_by_its_binding_does_not_stop_the_next_answers(tmp_path: Path) -> None:
    names = {1000: binding_name("spare", 5), 1001: binding_name("b", 1), 1002: binding_name("c", 2)}
    g = RegisteredGrid(*grid_args(tmp_path), names=names)
    roster = Roster(g, 3)
    roster.refresh(1)
    assert roster.nodes == {1: 1001, 2: 1002}
    assert roster.take_refused() == ["node 1000: claims partition-id 0, but it is registered for partition 5"]


def grid_args(tmp_path: Path) -> tuple[object, ...]:
    from fedapp.client_app import app

    return app, full_config({"num-clients": 3, "run-dir": str(tmp_path)}), 3, [{"num-partitions": 3} for _ in range(3)]


def test_nodes_that_answered_before_the_size_was_known_are_placed_with_their_facts(tmp_path: Path) -> None:
    g = grid(tmp_path, 3, num_clients=0)
    del g.contexts[1000].node_config["num-partitions"]  # an older node: answers, says nothing of the size
    roster = Roster(g, 0)
    roster.nodes = {0: 999}  # partition 0 held by a node that is not online any more
    roster.query([1000, 1001, 1002], 1, online={1000, 1001, 1002})
    assert roster.num_clients == 3 and roster.waiting == {}
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002} and roster.info[0]["device-name"] == "board-0"
    assert "num-partitions" not in roster.info[0] and roster.info[1]["num-partitions"] == 3
    held = Roster(grid(tmp_path, 1, num_clients=1), 1)
    held.nodes = {0: 999}
    held.query([1000], 1, online={1000})  # the size known at once: the same online rule
    assert held.nodes == {0: 1000}


def test_discovery_is_marked_done_and_a_timeout_names_at_most_ten_missing_partitions(tmp_path: Path) -> None:
    roster = Roster(grid(tmp_path, 2, num_clients=2), 2)
    assert not roster.discovered
    roster.discover(5)
    assert roster.discovered is True
    g = grid(tmp_path, 1, num_clients=12, partitions=12)
    with pytest.raises(ConfigError, match=re.escape("no node holds partition-id(s) [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] (1 node(s) found)")):
        Roster(g, 12).discover(0)
    assert g.ttls == [1.0] and g.timeouts == [1.0]  # a spent deadline still asks with a one-second TTL, once
