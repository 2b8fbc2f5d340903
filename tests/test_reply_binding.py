"""A reply counts only if it answers the message sent to the node it comes from (in the in-process
engine, its batched lanes, and on the server for any grid): a node answering as another is that
node's own failure, and the model is the one the honest replies alone make."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from fedapp.engine.local_grid import LocalGrid
from fedapp.server.reply_binding import bind
from tests.test_faults import BAD, malicious_app, run


@pytest.fixture(autouse=True)
def task_identity() -> None:
    """Messages made outside a SuperLink need Flower's task identity (as LocalGrid sets it)."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1  # type: ignore[misc]


def sent_message(node: int, mid: str) -> Message:
    msg = Message(RecordDict({"config": ConfigRecord({"x": 1})}), dst_node_id=node, message_type=MessageType.TRAIN, group_id="1")
    msg.metadata.__dict__["_message_id"] = mid
    return msg


def reply(to: Message, src: int | None = None, rid: str | None = None) -> Message:
    out = Message(RecordDict(), reply_to=to)
    if src is not None:
        out.metadata.__dict__["_src_node_id"] = src
    if rid is not None:
        out.metadata.__dict__["_reply_to_message_id"] = rid
    return out


def test_hundreds_of_generated_exchanges_keep_exactly_the_first_true_answer_to_each_message() -> None:
    rng = random.Random(37)
    for trial in range(400):
        nodes = rng.sample(range(1000, 1010), rng.randint(1, 6))
        sent = [sent_message(n, f"m{trial}-{i}") for i, n in enumerate(nodes)]
        replies = []
        for _ in range(rng.randint(0, 10)):
            to = rng.choice(sent)
            kind = rng.random()
            if kind < 0.4:
                replies.append(reply(to))  # honest
            elif kind < 0.6:
                replies.append(reply(to, src=rng.choice([*nodes, 1042])))  # claims a node (maybe its own)
            elif kind < 0.75:
                replies.append(reply(to, rid=rng.choice([f"m{trial}-99", "", f"m{trial - 1}-0"])))  # names a message not sent
            else:
                replies.append(reply(to, rid=rng.choice(sent).metadata.message_id))  # names another node's message
        kept, reasons = bind(sent, replies)
        want = []  # independently: per sent message, the first reply that names it and comes from its node
        for msg in sent:
            first = next(
                (
                    i
                    for i, r in enumerate(replies)
                    if r.metadata.reply_to_message_id == msg.metadata.message_id and r.metadata.src_node_id == msg.metadata.dst_node_id
                ),
                None,
            )
            if first is not None:
                want.append(first)
        assert [replies.index(r) for r in kept] == sorted(want), trial
        assert len(reasons) == len(replies) - len(kept) and all(r.startswith("node ") and "\n" not in r for r in reasons)


def test_messages_a_grid_gave_no_id_are_bound_by_node_once() -> None:
    sent = [sent_message(1000, ""), sent_message(1001, "")]
    replies = [reply(sent[0], rid="made-up"), reply(sent[0]), reply(sent[0]), reply(sent[1], src=1005), reply(sent[1])]
    kept, reasons = bind(sent, replies)
    assert kept == [replies[1], replies[4]]
    assert reasons == [
        "node 1000: reply to message 'made-up', which this exchange did not send to it, dropped",
        "node 1000: second reply to one message dropped",
        "node 1005: reply to message '', which this exchange did not send to it, dropped",
    ]


def as_node_0(msg: Message) -> Message:
    """The BAD node answers as partition 0's node: its reply claims node 1000 and partition 0."""
    msg.metadata.__dict__["_src_node_id"] = 1000  # Flower gives the field no setter
    msg.content.metric_records["metrics"]["partition-id"] = 0
    return msg


def crash(msg: Message) -> Message:
    raise RuntimeError("node down")


class RelayGrid(LocalGrid):
    """A grid that relays whatever a client returns, as a SuperLink would relay a forged reply: only the server's own check is left."""

    def _deliver(self, msg: Message) -> Message:
        self.stamp([msg])
        return self._answer(msg)


@pytest.mark.parametrize("over", [{}, {"client-batch": "3"}], ids=["in-process", "batched lanes"])
def test_a_node_answering_as_another_fails_alone_and_the_model_is_the_honest_ones(tmp_path: Path, over: dict[str, Any]) -> None:
    forged, model = run(tmp_path / "forged", malicious_app(train=as_node_0), over)
    failed, want = run(tmp_path / "failed", malicious_app(train=crash), over)
    for r in forged:
        assert (r["clients"], r["failures"], r["failed_pids"]) == (2, 1, [BAD]), r
        assert any(
            "reply not bound to its message (reply names message 'local-" in f and "from node 1000)" in f for f in r["failure_reasons"]
        )
    assert all(np.array_equal(model[k], want[k]) for k in want)  # partition 0 averaged once, nothing credited to it from BAD
    assert [r["accuracy"] for r in forged] == [r["accuracy"] for r in failed]


def test_the_server_drops_a_reply_bound_to_another_nodes_message_whatever_the_grid(tmp_path: Path) -> None:
    forged, model = run(tmp_path / "forged", malicious_app(train=as_node_0), grid_cls=RelayGrid)
    _, want = run(tmp_path / "failed", malicious_app(train=crash))
    for r in forged:
        assert (r["clients"], r["failures"], r["failed_pids"]) == (2, 1, [BAD]), r
        assert "node 1000: reply to the message sent to node 1001 dropped (not bound to its node)" in r["failure_reasons"], r
        assert any(f == "no reply before round-timeout" for f in r["failure_reasons"])  # BAD's own message went unanswered
    assert all(np.array_equal(model[k], want[k]) for k in want)


def earlier_message(msg: Message) -> Message:
    """The BAD node's reply names the run's first message (another node's, an earlier round's) as the one it answers."""
    msg.metadata.__dict__["_reply_to_message_id"] = "local-1"
    return msg


def test_a_reply_naming_another_message_from_its_own_node_is_that_nodes_failure(tmp_path: Path) -> None:
    out, _ = run(tmp_path / "r", malicious_app(train=earlier_message))
    for r in out:
        assert (r["clients"], r["failures"], r["failed_pids"]) == (2, 1, [BAD]), r
        assert any("reply not bound to its message (reply names message 'local-1' from node 1001)" in f for f in r["failure_reasons"])


def test_a_reply_repeating_one_of_the_nodes_earlier_replies_is_flagged_in_the_row(tmp_path: Path) -> None:
    kept: list[RecordDict] = []

    def replay(msg: Message) -> Message:
        """Round 1: keep the reply; later rounds: send round 1's arrays again (with this round's metrics)."""
        if not kept:
            kept.append(RecordDict(dict(msg.content.array_records.items())))
            return msg
        for name, record in kept[0].array_records.items():
            msg.content[name] = record
        return msg

    out, _ = run(tmp_path / "r", malicious_app(train=replay), {"num-server-rounds": 3})
    assert ["replayed_pids" in r for r in out] == [False, True, True]
    assert [r.get("replayed_pids") for r in out[1:]] == [[BAD], [BAD]]
    assert all(r["failures"] == 0 for r in out)  # flagged, not refused


def test_the_superlinks_own_error_for_an_undeliverable_message_counts_as_that_messages_answer() -> None:
    """Flower's SuperLink answers a message whose node went offline (or that expired) with an error from
    node SUPERLINK_NODE_ID: that is the message's failure now, not a stranger's reply to drop until round-timeout.
    Only an error, only once, and only for a message this exchange sent."""
    from flwr.app import Error
    from flwr.common.constant import SUPERLINK_NODE_ID

    sent = [sent_message(1000, "m0"), sent_message(1001, "m1")]

    def superlink_error(to: Message, rid: str) -> Message:
        out = Message(Error(code=0, reason="Node Unavailable"), reply_to=to)
        out.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
        out.metadata.__dict__["_reply_to_message_id"] = rid
        return out

    unavailable, again, stranger = superlink_error(sent[0], "m0"), superlink_error(sent[0], "m0"), superlink_error(sent[1], "mx")
    content = reply(sent[1], src=SUPERLINK_NODE_ID)  # content, not an error, claimed by the SuperLink's id: dropped
    kept, reasons = bind(sent, [unavailable, again, stranger, content, reply(sent[1])])
    assert kept[0] is unavailable and len(kept) == 2 and kept[1].metadata.src_node_id == 1001
    assert len(reasons) == 3
