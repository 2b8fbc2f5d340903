"""A reply counts only if it answers a message this exchange sent, to the node it comes from, once.

Every engine delivers replies with Flower's metadata: ``reply_to_message_id`` (the id the grid
gave the message when it was pushed: Flower's grids set it, the in-process engine and its Ray
workers stamp one, fedapp.engine.local_grid) and ``src_node_id``. A reply whose id names no
message of this exchange, names one sent to another node, or answers a message already
answered is dropped with a reason: it is never read as the partition it claims, so no partition
is averaged twice and nothing is credited to a node that did not send it. The node whose own
message then has no reply fails as any silent node does. A message the grid gave no id
(a grid that sets none) is bound by node alone: one reply per node it was sent to.

A reply whose arrays are byte for byte those of one of that node's earlier replies (a replay)
is flagged in the round's row (``replayed_pids``), not refused: an honest node trains from a new
global model every round, so its values repeat only if nothing it trains on changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from flwr.app import Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID


def bind(sent: Sequence[Message], replies: Iterable[Message]) -> tuple[list[Message], list[str]]:
    """The replies that answer ``sent`` (in arrival order), and one reason per reply dropped."""
    by_id = {m.metadata.message_id: m for m in sent if m.metadata.message_id}
    unstamped = {m.metadata.dst_node_id for m in sent if not m.metadata.message_id}
    answered: set[str | int] = set()  # message ids, and nodes of messages without one
    kept: list[Message] = []
    reasons: list[str] = []
    for reply in replies:
        node, rid = reply.metadata.src_node_id, reply.metadata.reply_to_message_id
        msg = by_id.get(rid) if rid else None
        if msg is not None and node == SUPERLINK_NODE_ID and reply.has_error() and rid not in answered:
            answered.add(rid)  # the SuperLink's own word on a message it could not deliver (its node went offline, or it
            kept.append(reply)  # expired): an error carrying nothing, that message's failure now rather than at round-timeout
            continue
        key: str | int = rid if msg is not None else node
        if msg is None and (rid or node not in unstamped):
            reasons.append(f"node {node}: reply to message {rid[:40]!r}, which this exchange did not send to it, dropped")
        elif msg is not None and msg.metadata.dst_node_id != node:
            reasons.append(f"node {node}: reply to the message sent to node {msg.metadata.dst_node_id} dropped (not bound to its node)")
        elif key in answered:
            reasons.append(f"node {node}: second reply to one message dropped")
        else:
            answered.add(key)
            kept.append(reply)
    return kept, reasons


def digest(content: RecordDict) -> str:
    """A digest of every array a reply carries (record and array names, dtypes, shapes, bytes)."""
    h = hashlib.sha256()
    for name, record in sorted(content.array_records.items()):
        for key, array in sorted(record.items()):
            h.update(f"{name}/{key}:{array.dtype}:{list(array.shape)}:{len(array.data)}:".encode())
            h.update(array.data)
    return h.hexdigest()


class Replays:
    """Per node, the digests of its accepted train replies; ``seen`` says whether one repeats."""

    def __init__(self) -> None:
        self.digests: dict[int, set[str]] = {}

    def seen(self, node: int, content: RecordDict) -> bool:
        d = digest(content)
        known = self.digests.setdefault(node, set())
        repeat = d in known
        known.add(d)
        return repeat
