"""MaskedStrategy: a Flower Strategy with per-node messages and masked averaging.

Stock FedAvg sends one RecordDict to everyone and requires identical keys in every
reply (../shared/specs/flower-1.41.md §2.2). Here each node gets its own message
(config + extra records from the method's server policy), replies may carry any
subset of tensors with packed masks, and a bad or failed reply is logged, counted
in ``failures`` and never aggregated.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedapp import wire
from fedapp.aggregate import masked_mean
from fedapp.config import RunConfig
from fedapp.methods.base import Reply, ServerPolicy

log = logging.getLogger("flwr")

RESERVED = {"arrays", "arrays-mask", "config", "values", "mask", "metrics"}


@dataclass
class RoundStats:
    """What one round cost and how it went (becomes part of the metrics row)."""

    sent: int = 0
    clients: int = 0
    failures: int = 0
    bytes_up: int = 0
    bytes_up_eval: int = 0
    bytes_down: int = 0
    coverage: float = 0.0
    reasons: list[str] = field(default_factory=list)
    failed_pids: list[int] = field(default_factory=list)
    client_metrics: dict[int, dict[str, float]] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "clients": self.clients, "failures": self.failures, "bytes_up": self.bytes_up,
            "bytes_up_eval": self.bytes_up_eval, "bytes_down": self.bytes_down, "coverage": self.coverage,
            "failed_pids": self.failed_pids, "failure_reasons": [r[:300] for r in self.reasons],
        }  # fmt: skip


def record_bytes(content: RecordDict, only: Iterable[str] | None = None, skip: Iterable[str] = ()) -> int:
    """Bytes of a message's ArrayRecords (``only`` those names, if given; never ``skip``)."""
    wanted = None if only is None else set(only)
    return sum(rec.count_bytes() for n, rec in content.array_records.items() if (wanted is None or n in wanted) and n not in skip)


class MaskedStrategy(Strategy):
    def __init__(self, cfg: RunConfig, policy: ServerPolicy, nodes: dict[int, int]):
        """``nodes`` maps partition id -> Flower node id (from discovery)."""
        self.cfg, self.policy, self.nodes = cfg, policy, dict(nodes)
        self.rng = random.Random(cfg.seed)
        self.sent_pids: list[int] = []
        self.global_np: dict[str, np.ndarray] = {}
        self.stats = RoundStats()
        self.eval_stats: dict[str, Any] = {}
        self.eval_client_metrics: dict[int, dict[str, float]] = {}  # partition id -> its evaluate reply metrics
        self.extra_metrics: dict[str, Any] = {}

    # -- training -------------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        self.global_np = wire.from_record(arrays)
        chosen = self.policy.select(server_round, sorted(self.nodes), self.rng)
        self.stats = RoundStats()
        self.extra_metrics = {}
        self.sent_pids = list(chosen)
        messages = []
        for pid in chosen:
            task = self.policy.node_task(server_round, pid)
            content = RecordDict()
            if task.download_masks is None:
                content["arrays"] = arrays
            else:
                content["arrays"], content["arrays-mask"] = wire.encode(self.global_np, task.download_masks)
            for name, record in task.records.items():
                if name in RESERVED:
                    raise ValueError(f"method record name {name!r} clashes with a reserved record")
                content[name] = wire.to_record(record)
            content["config"] = ConfigRecord({**dict(config), **task.config, "server-round": server_round, "partition-id": pid})
            self.stats.bytes_down += record_bytes(content)
            messages.append(self._message(content, pid, MessageType.TRAIN, server_round))
        self.stats.sent = len(messages)
        return messages

    def _message(self, content: RecordDict, pid: int, message_type: str, server_round: int) -> Message:
        """A message that expires with the round: a node that reconnects late never trains on a stale round."""
        node = self.nodes[pid]
        return Message(content, dst_node_id=node, message_type=message_type, group_id=str(server_round), ttl=self.cfg.round_timeout)

    def decode(self, msg: Message) -> Reply:
        content = msg.content
        metrics = {k: float(v) for k, v in content["metrics"].items()}  # type: ignore[arg-type]
        pid = int(metrics.get("partition-id", -1))
        if pid not in self.nodes:
            raise wire.WireError(f"reply names unknown partition-id {pid}")
        contribution = wire.decode(content["values"], content.array_records.get("mask"), self.global_np, self.policy.weight(metrics))  # type: ignore[arg-type]
        records = {n: wire.from_record(r) for n, r in content.array_records.items() if n not in RESERVED}
        return Reply(pid, contribution, metrics, records)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        ok: list[Reply] = []
        received = 0
        for msg in replies:
            received += 1
            if msg.has_error():
                self._fail(f"node {msg.metadata.src_node_id}: {msg.error.reason}")
                continue
            try:
                reply = self.decode(msg)
            except (wire.WireError, KeyError, TypeError, ValueError) as err:
                self._fail(f"node {msg.metadata.src_node_id}: bad reply dropped ({err})")
                continue
            self.stats.bytes_up += record_bytes(msg.content, skip=self.policy.eval_records)
            self.stats.bytes_up_eval += record_bytes(msg.content, only=self.policy.eval_records)
            self.stats.client_metrics[reply.pid] = reply.metrics
            ok.append(reply)
        for _ in range(self.stats.sent - received):
            self._fail("no reply before round-timeout")
        self.stats.failed_pids = sorted(set(self.sent_pids) - {r.pid for r in ok})
        self.stats.clients = len(ok)
        if len(ok) < self.cfg.min_replies:
            log.warning("round %d: %d replies < min-replies %d; global model unchanged", server_round, len(ok), self.cfg.min_replies)
            return None, MetricRecord({"clients": len(ok)})
        agg = masked_mean(self.global_np, [r.contribution for r in ok], self.policy.server_lr(server_round))
        self.stats.coverage = agg.coverage
        self.extra_metrics = self.policy.after_round(server_round, ok)
        return wire.to_record(agg.arrays), MetricRecord({"clients": len(ok)})

    def _fail(self, reason: str) -> None:
        self.stats.failures += 1
        self.stats.reasons.append(reason)
        log.warning("%s", reason)

    # -- evaluation (personalised methods, or personalized-eval = true) ---------------
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        if not (self.policy.personalized_eval or self.cfg.personalized_eval) or not self.personal_eval_round(server_round):
            return []
        messages = []
        for pid in sorted(self.nodes):
            cfg = ConfigRecord(
                {**dict(config), **self.policy.eval_config(server_round, pid), "server-round": server_round, "partition-id": pid}
            )
            content = RecordDict({"arrays": arrays, "config": cfg})
            messages.append(self._message(content, pid, MessageType.EVALUATE, server_round))
        return messages

    def personal_eval_round(self, server_round: int) -> bool:
        """Rounds that evaluate every client: multiples of personalized-eval-every, and the last
        round (the configured one, or the one the method stops after)."""
        every, last = self.cfg.personalized_eval_every, self.cfg.num_server_rounds
        return server_round % every == 0 or server_round == last or self.policy.finished(server_round)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        ok = [{k: float(v) for k, v in m.content["metrics"].items()} for m in replies if not m.has_error()]  # type: ignore[arg-type]
        self.eval_client_metrics = {int(m.get("partition-id", -1)): m for m in ok}
        accs = [m["accuracy"] for m in ok]
        if not accs:
            self.eval_stats = {}
            return None
        self.eval_stats = {
            "personalized_accuracy": float(np.mean(accs)), "personalized_accuracy_min": min(accs),
            "personalized_accuracy_max": max(accs), "evaluated_clients": len(accs),
        }  # fmt: skip
        return MetricRecord(dict(self.eval_stats))

    def summary(self) -> None:
        log.info("MaskedStrategy: method=%s clients=%d server-lr=%s", self.cfg.method, len(self.nodes), self.cfg.server_lr)
