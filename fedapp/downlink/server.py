"""The server's half of ``downlink = selected``: what each node holds, what to send it, and the
full model in the same round for a node whose cache the node itself refused.

Per partition the server remembers the node it sent to, the round and the model digest of the
last train message that node answered (an answer proves it received, and cached, that model).
A node with such a record gets only the tensors whose digest changed since that round, plus the
base round and digest its cache must hold; one that answered nothing, changed node id (a SuperNode
restart), or has no record (first round, a resumed server) gets the full model. A node that misses
rounds (``fraction-train`` < 1) gets every tensor changed since its round: a catch-up. A tensor of
which only some entries changed (FedPeWS's warm-up: the server moves only the entries some
client's mask held) travels as those entries plus a packed mask of them (``arrays-mask``, the
encoding of fedapp.core.wire), where that is smaller than the tensor. A node whose
cache fails its check answers "cache-miss" (fedapp.downlink.cache) and is sent the full model in a
second exchange of the same round, so results never depend on a cache. The round's row names all
of it under ``downlink``: ``full`` (partition: why), ``catch_up`` (partition: [since round,
tensors]), ``cache_miss`` (partition: the node's reason).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

from fedapp.core import wire
from fedapp.downlink.cache import BASE_DIGEST_KEY, BASE_KEY, DIGEST_KEY, MISS_METRIC, REASONS
from fedapp.downlink.digest import model_digest, tensor_digest


@dataclass(frozen=True)
class Held:
    node: int
    round: int
    digest: str


@dataclass
class Notes:
    full: dict[int, str] = field(default_factory=dict)
    catch_up: dict[int, list[int]] = field(default_factory=dict)
    cache_miss: dict[int, str] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "full": {str(p): why for p, why in sorted(self.full.items())},
            "catch_up": {str(p): v for p, v in sorted(self.catch_up.items())},
            "cache_miss": {str(p): why for p, why in sorted(self.cache_miss.items())},
        }


class Downlink:
    """One run's downlink bookkeeping (``mode`` full: every message carries the whole model, unchanged)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.held: dict[int, Held] = {}
        self.history: dict[int, dict[str, str]] = {}  # round -> per-tensor digests of the model sent that round
        self.values: dict[int, dict[str, np.ndarray]] = {}  # round -> that model as the node reads it (for entry deltas)
        self.round, self.digest, self.notes = 0, "", Notes()
        self.sent: dict[int, tuple[int, RecordDict]] = {}  # partition -> (node, content) of this round's partial messages
        self._subsets: dict[int, dict[str, ArrayRecord]] = {}  # base round -> the records sent to nodes holding it

    @property
    def selected(self) -> bool:
        return self.mode == "selected"

    def start_round(self, server_round: int, arrays: ArrayRecord, values: Mapping[str, np.ndarray]) -> None:
        """Digest the round's global model: ``values`` are the record's ``arrays`` as the node reads
        them (widened from the wire dtype), which is what it caches and hashes."""
        self.round, self.notes, self.sent, self._subsets = server_round, Notes(), {}, {}
        self.history[server_round] = {n: tensor_digest(n, values[n]) for n in arrays}
        self.values[server_round] = {n: np.array(values[n], copy=True) for n in arrays}
        self.digest = model_digest(self.history[server_round])
        keep = {h.round for h in self.held.values()} | {server_round}
        for r in [r for r in self.history if r not in keep]:
            del self.history[r], self.values[r]

    def arrays_for(self, pid: int, node: int, arrays: ArrayRecord) -> tuple[dict[str, ArrayRecord], dict[str, Any]]:
        """The array records (``arrays``, and ``arrays-mask`` where entries travel alone) and the
        config keys of ``pid``'s train message this round."""
        held = self.held.get(pid)
        why = "no model sent yet" if held is None else "node changed" if held.node != node else ""
        if why or held is None:
            self.notes.full[pid] = why
            return {"arrays": arrays}, {DIGEST_KEY: self.digest, BASE_KEY: 0, BASE_DIGEST_KEY: ""}
        if held.round not in self._subsets:
            self._subsets[held.round] = self.changes(held.round, arrays)
        records = self._subsets[held.round]
        if held.round < self.round - 1:
            self.notes.catch_up[pid] = [held.round, len(records["arrays"])]
        return records, {DIGEST_KEY: self.digest, BASE_KEY: held.round, BASE_DIGEST_KEY: held.digest}

    def changes(self, base: int, arrays: ArrayRecord) -> dict[str, ArrayRecord]:
        """What a node holding round ``base``'s model lacks: each changed tensor whole, or, where
        that is smaller, its changed entries (bit for bit) with their mask."""
        old, now = self.history[base], self.history[self.round]
        dense: dict[str, Any] = {}
        sparse: dict[str, np.ndarray] = {}
        masks: dict[str, np.ndarray] = {}
        for n in arrays:
            if old.get(n) == now[n]:
                continue
            sent = wire.view_array(arrays[n])
            m = changed_entries(self.values[base][n], self.values[self.round][n])
            if masked_is_smaller(m, sent.dtype.itemsize):
                sparse[n], masks[n] = sent, m
            else:
                dense[n] = arrays[n]
        values, bits = wire.encode(sparse, masks)
        out = {"arrays": ArrayRecord({n: dense[n] if n in dense else values[n] for n in arrays if n in dense or n in sparse})}
        if bits:
            out["arrays-mask"] = bits
        return out

    def full_content(self, pid: int, arrays: ArrayRecord) -> RecordDict:
        """``pid``'s message of this round again, with the full model (after its cache-miss)."""
        content = self.sent[pid][1]
        config = ConfigRecord({**dict(content["config"]), BASE_KEY: 0, BASE_DIGEST_KEY: ""})  # type: ignore[arg-type]
        out = RecordDict({n: r for n, r in content.items() if n not in ("config", "arrays-mask")})
        out["arrays"], out["config"] = arrays, config
        return out

    def exchange(
        self, send: Callable[[list[Message]], Iterable[Message]], messages: list[Message], arrays: ArrayRecord,
        make: Callable[[RecordDict, int], Message], on_send: Callable[[int, RecordDict], None],
    ) -> list[Message]:  # fmt: skip
        """Send the round's train messages; resend the full model to every node that answered
        cache-miss; remember what each answering node now holds. Returns the train replies."""
        replies = list(send(messages))
        if not self.selected:
            return replies
        by_node = {node: pid for pid, (node, _) in self.sent.items()}
        retry, kept = [], []
        for msg in replies:
            pid = by_node.get(msg.metadata.src_node_id)
            code = None if msg.has_error() or pid is None else miss_code(msg)
            if code is None or pid is None:
                kept.append(msg)
                continue
            self.notes.cache_miss[pid] = REASONS.get(code, f"code {code}")
            content = self.full_content(pid, arrays)
            on_send(pid, content)
            retry.append(make(content, pid))
        if retry:  # in the order the round sent its messages: the same float64 sums as under full
            order = {m.metadata.dst_node_id: i for i, m in enumerate(messages)}
            kept = sorted([*kept, *send(retry)], key=lambda m: order.get(m.metadata.src_node_id, len(order)))
        answered = {by_node[m.metadata.src_node_id] for m in kept if not m.has_error() and m.metadata.src_node_id in by_node}
        for pid, (node, _) in self.sent.items():
            if pid in answered and miss_code_of(kept, node) is None:
                self.held[pid] = Held(node, self.round, self.digest)
            else:
                self.held.pop(pid, None)  # unknown what it holds: the full model next time
        return kept


def changed_entries(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Entries whose bytes differ (0.0 and -0.0 differ: the node's rebuilt model must hash to the server's)."""
    a = np.ascontiguousarray(old).reshape(-1).view(np.uint8).reshape(old.size, old.dtype.itemsize)
    b = np.ascontiguousarray(new).reshape(-1).view(np.uint8).reshape(new.size, new.dtype.itemsize)
    return np.asarray((a != b).any(axis=1)).reshape(new.shape)


NPY_HEADER = 128  # bytes of a .npy header (fedapp.core.wire): the cost of one more array


def masked_is_smaller(mask: np.ndarray, itemsize: int) -> bool:
    """Whether the changed entries plus their packed mask (wire.encode's cheaper form) take fewer
    bytes than the whole tensor."""
    factors = wire.outer_factors(mask)
    bits = (mask.size + 7) // 8 if factors is None else sum((f.size + 7) // 8 for f in factors) + NPY_HEADER
    return (mask.size - int(mask.sum())) * itemsize > bits + NPY_HEADER


def miss_code(msg: Message) -> int | None:
    """The reason code of a cache-miss reply (None: an ordinary reply)."""
    metrics = msg.content.metric_records.get("metrics")
    if metrics is None or MISS_METRIC not in metrics or "values" in msg.content.array_records:
        return None
    value = metrics[MISS_METRIC]
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def miss_code_of(replies: list[Message], node: int) -> int | None:
    for m in replies:
        if m.metadata.src_node_id == node and not m.has_error():
            return miss_code(m)
    return None
