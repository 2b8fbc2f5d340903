"""MaskedStrategy: a Flower Strategy with per-node messages and masked averaging.

Stock FedAvg sends one RecordDict to everyone and requires identical keys in every
reply (../shared/specs/flower-1.41.md §2.2). Here each node gets its own message
(config + extra records from the method's server policy), replies may carry any
subset of tensors with packed masks, and a bad or failed reply is logged, counted
in ``failures`` and never aggregated. Replies are checked, not trusted
(reply_checks.py): whatever goes wrong while handling one node's reply, a check or an
exception, is that node's failure with its reason in ``failure_reasons``, and the run
goes on. An aggregate that is not finite is not installed: the round keeps the previous
model and its row says ``aggregate_rejected``.

``aggregate_train`` and ``aggregate_evaluate`` return everything they aggregated (a
``RoundResult``, an ``EvalResult``; each unpacks like Flower's own return pair), so the round
loop (session.py) reads results, never the strategy's attributes.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedapp.core import score_keys, wire
from fedapp.core.config import RunConfig
from fedapp.data.sizes import split_sizes
from fedapp.downlink.precision import narrow, widen
from fedapp.downlink.server import Downlink
from fedapp.downlink.traffic import Sizer, message_bytes, wire_row
from fedapp.methods.base import NodeTask, Reply, ServerPolicy
from fedapp.server import reply_checks as checks
from fedapp.server import robust
from fedapp.server.reply_binding import Replays, bind
from fedapp.server.scores import ScoreBook

log = logging.getLogger("flwr")


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
    anomaly: dict[int, dict[str, Any]] = field(default_factory=dict)  # per partition: fedapp.server.robust.anomaly's score
    wire_down: dict[int, int] = field(default_factory=dict)  # per partition: serialized bytes of all messages sent (downlink.traffic)
    wire_up: dict[int, int] = field(default_factory=dict)  # per partition: serialized bytes of every reply received
    downlink: dict[str, Any] | None = None  # downlink = selected: who got the full model, a catch-up, a cache-miss resend
    scores: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)  # score_keys.BEFORE/AFTER -> pid -> its score
    messages: dict[str, int] = field(default_factory=lambda: {"train": 0, "evaluate": 0})  # messages sent while the round played
    online: dict[int, int] = field(default_factory=dict)  # partition -> node of every node online this round
    sent_nodes: dict[int, int] = field(default_factory=dict)  # partition -> node its train message went to
    replayed: list[int] = field(default_factory=list)  # partitions whose reply repeats one of their node's earlier replies

    def row(self, more_reasons: Iterable[str] = ()) -> dict[str, Any]:
        """The row's core round keys; ``more_reasons`` (the evaluation's) follow this round's own."""
        reasons = [*self.reasons, *more_reasons]
        row = {
            "clients": self.clients, "failures": self.failures, "bytes_up": self.bytes_up,
            "bytes_up_eval": self.bytes_up_eval, "bytes_down": self.bytes_down, "coverage": self.coverage,
            "failed_pids": self.failed_pids, "failure_reasons": [r[:300] for r in reasons],
        }  # fmt: skip
        if self.anomaly:
            row["anomaly"] = {str(pid): score for pid, score in sorted(self.anomaly.items())}
        row.update(wire_row(self.wire_down, self.wire_up))
        if self.downlink is not None:
            row["downlink"] = self.downlink
        row["messages"] = dict(self.messages)
        if self.replayed:
            row["replayed_pids"] = sorted(self.replayed)
        return row


@dataclass
class RoundResult:
    """What ``aggregate_train`` aggregated: the new global arrays (None: the model stays), Flower's
    train MetricRecord, the round's stats (failures, coverage, bytes, per-client reply metrics),
    whether a non-finite aggregate was rejected, the method's own metrics (its namespace), and the
    new global arrays as numpy (``values``, what ``arrays`` records: the round loop needs no decode)."""

    arrays: ArrayRecord | None
    metrics: MetricRecord
    stats: RoundStats
    rejected: bool = False
    method_metrics: dict[str, Any] = field(default_factory=dict)
    values: dict[str, np.ndarray] | None = None

    def __iter__(self) -> Iterator[Any]:
        """Unpacks as Flower's ``(arrays, metrics)`` pair (Strategy.start reads it that way)."""
        return iter((self.arrays, self.metrics))


@dataclass
class EvalResult:
    """What ``aggregate_evaluate`` aggregated: Flower's evaluate MetricRecord (None: no accuracy),
    the row's evaluation keys, each partition's reply metrics, and why replies were dropped."""

    metrics: MetricRecord | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    client_metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)


def record_bytes(content: RecordDict, only: Iterable[str] | None = None, skip: Iterable[str] = ()) -> int:
    """Bytes of a message's ArrayRecords (``only`` those names, if given; never ``skip``)."""
    wanted = None if only is None else set(only)
    return sum(rec.count_bytes() for n, rec in content.array_records.items() if (wanted is None or n in wanted) and n not in skip)


class MaskedStrategy(Strategy):
    def __init__(
        self, cfg: RunConfig, policy: ServerPolicy, nodes: dict[int, int],
        refresh: Callable[[], dict[int, int]] | None = None, sampling: Any = None, scale: dict[str, float] | None = None,
        book: ScoreBook | None = None,
    ):  # fmt: skip
        """``nodes`` maps partition id -> Flower node id (from discovery); ``refresh`` gives the
        nodes anew before every round but the first this strategy configures (the roster's, which
        follows nodes going offline and joining); ``sampling``: the client-sampling random state
        to go on from (a checkpoint's, on resume); ``scale``: the step bound's unit per float tensor
        (``reply_checks.scales`` of the initial model; default: of the first round's global model);
        ``book``: the clients' personalised scores (which train messages also score, fedapp.server.scores)."""
        self.cfg, self.policy, self.nodes, self.refresh = cfg, policy, dict(nodes), refresh
        self.rng = random.Random(cfg.seed)
        if sampling is not None:
            self.rng.setstate(sampling)
        self.configured = 0  # rounds configured so far
        self.sent_pids: list[int] = []
        self.global_np: dict[str, np.ndarray] = {}
        self.stats = RoundStats()  # this round's, filled from configure_train to aggregate_train
        self.sent_nodes: dict[int, int] = {}  # partition id -> node its train task went to this round
        self.tasks: dict[int, NodeTask] = {}  # partition id -> its train task this round (what its reply may cover)
        self.eval_nodes: dict[int, int] = {}  # partition id -> node its evaluate task went to this round
        self.replays = Replays()  # per node, what its accepted train replies held (a replay is flagged)
        self.eval_sent: list[Message] = []  # this round's evaluate messages, which its evaluate replies must answer
        self.scale: dict[str, float] = dict(scale or {})  # per float tensor: the unit of the step bound (reply_checks.scales)
        self.limits: tuple[dict[str, int], dict[str, int]] = ({}, {})  # most data bytes per values / mask array
        self.sizes = split_sizes(cfg)  # per partition: local train and test samples (deterministic split)
        self.downlink = Downlink(cfg.downlink)  # what each node holds (downlink = selected)
        self.sizer = Sizer()  # serialized message sizes, shared records sized once per round
        self.record = ArrayRecord()  # this round's global model as sent
        self.book = book if book is not None else ScoreBook(policy, cfg)

    def sampling_state(self) -> Any:
        """The client-sampling random state, as a checkpoint keeps it."""
        return self.rng.getstate()

    # -- training -------------------------------------------------------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        self.global_np = wire.from_record(arrays)
        if not self.scale:  # the initial model's (the run session passes it, also on resume): never raised by an aggregate
            self.scale = checks.scales(self.global_np)
        self.limits = wire.byte_limits(self.global_np)
        if self.configured and self.refresh is not None:
            self.nodes = self.refresh()
        self.configured += 1
        chosen = self.policy.select(server_round, sorted(self.nodes), self.rng)
        self.sent_pids = list(chosen)
        self.sent_nodes = {pid: self.nodes[pid] for pid in chosen}
        self.stats = RoundStats(online=dict(self.nodes), sent_nodes=dict(self.sent_nodes))
        self.tasks = {}
        sent_np, arrays = self.on_wire(arrays)
        self.record = arrays
        self.sizer.clear()
        if self.downlink.selected:
            self.downlink.start_round(server_round, arrays, widen(sent_np, self.global_np, self.cfg.wire_dtype))
        messages = []
        for pid in chosen:
            task = self.tasks[pid] = self.policy.node_task(server_round, pid)
            content = RecordDict()
            extra: dict[str, Any] = {}
            if task.download_masks is None and self.downlink.selected:
                delta, extra = self.downlink.arrays_for(pid, self.nodes[pid], arrays)
                for name, rec in delta.items():
                    content[name] = rec
            elif task.download_masks is None:
                content["arrays"] = arrays
            else:
                content["arrays"], content["arrays-mask"] = wire.encode(sent_np, task.download_masks)
            for name, record in task.records.items():
                if name in wire.RESERVED:
                    raise ValueError(f"method record name {name!r} clashes with a reserved record")
                content[name] = wire.to_record(record)
            scoring = self.book.flags(server_round, pid, task)
            content["config"] = ConfigRecord(
                {**dict(config), **task.config, "server-round": server_round, "partition-id": pid, **scoring, **extra}
            )
            self.stats.bytes_down += record_bytes(content)
            self.count_down(pid, content)
            if extra:
                self.downlink.sent[pid] = (self.nodes[pid], content)
            messages.append(self._message(content, pid, MessageType.TRAIN, server_round))
        self.stats.sent = len(messages)
        if self.downlink.selected:
            self.stats.downlink = self.downlink.notes.row()  # filled in as the round goes (cache-miss resends)
        return messages

    def on_wire(self, arrays: ArrayRecord) -> tuple[dict[str, np.ndarray], ArrayRecord]:
        """The global arrays as they travel (``wire-dtype``) and their record (``arrays`` itself at float32)."""
        if self.cfg.wire_dtype == "float32":
            return self.global_np, arrays
        sent = narrow(wire.from_record(arrays), self.cfg.wire_dtype)
        return sent, wire.to_record(sent)

    def exchange(self, grid: Grid, messages: list[Message], server_round: int) -> list[Message]:
        """Send the round's train messages and return the replies (``downlink = selected``: a node
        that refused its cache gets the full model in a second exchange), counting every reply's bytes."""

        def send(msgs: list[Message]) -> list[Message]:
            self.stats.messages["train"] += len(msgs)
            replies, dropped = bind(msgs, grid.send_and_receive(msgs, timeout=self.cfg.round_timeout))
            for reason in dropped:  # the node whose message it claimed to answer is unharmed; the sender's own message has no reply
                self.stats.reasons.append(reason)
                log.warning("round %d: %s", server_round, reason)
            self.count_up(replies, self.sent_nodes)
            return replies

        def message(content: RecordDict, pid: int) -> Message:
            return self._message(content, pid, MessageType.TRAIN, server_round)

        replies = self.downlink.exchange(send, messages, self.record, message, self.count_down)
        if self.downlink.selected:
            self.stats.downlink = self.downlink.notes.row()
        return replies

    def count_down(self, pid: int, content: RecordDict) -> None:
        self.stats.wire_down[pid] = self.stats.wire_down.get(pid, 0) + self.sizer.size(content)

    def count_up(self, replies: Iterable[Message], sent: dict[int, int]) -> None:
        by_node = {node: pid for pid, node in sent.items()}
        for msg in replies:
            pid = by_node.get(msg.metadata.src_node_id)
            if pid is not None and not msg.has_error():
                self.stats.wire_up[pid] = self.stats.wire_up.get(pid, 0) + message_bytes(msg.content)

    def _message(self, content: RecordDict, pid: int, message_type: str, server_round: int) -> Message:
        """A message that expires with the round: a node that reconnects late never trains on a stale round."""
        node = self.nodes[pid]
        return Message(content, dst_node_id=node, message_type=message_type, group_id=str(server_round), ttl=self.cfg.round_timeout)

    def decode(self, msg: Message, server_round: int) -> tuple[Reply, float]:
        """Check a train reply against its task (reply_checks.py), then decode it; raises on anything
        wrong. Returns the reply and its step (``reply_checks.reply_step``)."""
        content = msg.content
        metrics = checks.metrics_of(content)
        pid = checks.partition_of(metrics, msg.metadata.src_node_id, self.sent_nodes)
        specs = self.policy.reply_records(server_round, pid)
        checks.record_types(
            content, {"values": ArrayRecord, "mask": ArrayRecord, "metrics": MetricRecord, **dict.fromkeys(specs, ArrayRecord)}
        )
        if "values" not in content:
            raise checks.ReplyError("no 'values' ArrayRecord")
        checks.sample_count(metrics, self.sizes[pid].train)
        checks.check_arrays(content.array_records["values"], self.limits[0], "values")
        mask = content.array_records.get("mask")
        if mask is not None:
            checks.check_arrays(mask, self.limits[1], "mask")
        contribution = wire.decode(content.array_records["values"], mask, self.global_np, self.policy.weight(metrics), self.cfg.wire_dtype)
        checks.within_task(contribution, self.policy.upload_allowed(server_round, pid, self.tasks[pid]))
        step = checks.reply_step(contribution, self.global_np, self.scale)
        records = {n: checks.decode_record(content.array_records[n], spec, n) for n, spec in specs.items() if n in content}
        self.policy.check_records(server_round, pid, records)
        return Reply(pid, contribution, metrics, records), step

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> RoundResult:  # type: ignore[override]
        """Decode, check and average the replies; a RoundResult unpacks as Flower's (arrays, metrics)."""
        decoded: list[tuple[Message, Reply]] = []
        steps: list[float] = []
        received = 0
        stats = self.stats
        for msg in replies:
            received += 1
            if msg.has_error():
                self._fail(f"node {msg.metadata.src_node_id}: {msg.error.reason}")
                continue
            try:
                reply, step = self.decode(msg, server_round)
            except Exception as err:  # anything wrong with one node's reply is that node's failure
                self._fail(f"node {msg.metadata.src_node_id}: bad reply dropped ({describe(err)})")
                continue
            decoded.append((msg, reply))
            steps.append(step)
        outliers = checks.step_outliers(steps)
        ok: list[Reply] = []
        for i, (msg, reply) in enumerate(decoded):
            if i in outliers:
                self._fail(f"node {msg.metadata.src_node_id}: bad reply dropped (step outlier: {outliers[i]})")
                continue
            stats.bytes_up += record_bytes(msg.content, skip=self.policy.eval_records)
            stats.bytes_up_eval += record_bytes(msg.content, only=self.policy.eval_records)
            reply.metrics, carried = score_keys.split(reply.metrics)  # a score is the evaluation's, not the training's
            for which, score in carried.items():
                stats.scores.setdefault(which, {})[reply.pid] = score
            stats.client_metrics[reply.pid] = reply.metrics
            if self.replays.seen(msg.metadata.src_node_id, msg.content):
                stats.replayed.append(reply.pid)
                log.warning(
                    "round %d: node %s (partition %d) sent a reply identical to one of its earlier replies",
                    server_round,
                    msg.metadata.src_node_id,
                    reply.pid,
                )
            ok.append(reply)
        for _ in range(stats.sent - received):
            self._fail("no reply before round-timeout")
        stats.failed_pids = sorted(set(self.sent_pids) - {r.pid for r in ok})
        stats.clients = len(ok)
        counted = MetricRecord({"clients": len(ok)})
        if len(ok) < self.cfg.min_replies:
            log.warning("round %d: %d replies < min-replies %d; global model unchanged", server_round, len(ok), self.cfg.min_replies)
            return RoundResult(None, counted, stats)
        lr = self.policy.server_lr(server_round)
        cfg, contributions = self.cfg, [r.contribution for r in ok]
        agg, scores = robust.aggregate(cfg.aggregation, self.global_np, contributions, lr, cfg.trim_fraction, cfg.norm_bound_factor)
        stats.anomaly = {r.pid: score for r, score in zip(ok, scores, strict=True) if score}
        fault = checks.aggregate_fault(agg.arrays)
        if fault is not None:
            stats.reasons.append(f"round {server_round}: aggregate rejected, global model unchanged ({fault})")
            log.warning("%s", stats.reasons[-1])
            return RoundResult(None, counted, stats, rejected=True)
        stats.coverage = agg.coverage
        method_metrics: dict[str, Any] = {}
        try:
            method_metrics = self.policy.after_round(server_round, ok)
        except Exception as err:  # the replies passed every check: keep the round, say what the method could not use
            stats.reasons.append(f"round {server_round}: method bookkeeping failed ({describe(err)})")
            log.warning("%s", stats.reasons[-1])
        return RoundResult(wire.to_record(agg.arrays), counted, stats, method_metrics=method_metrics, values=agg.arrays)

    def _fail(self, reason: str) -> None:
        self.stats.failures += 1
        self.stats.reasons.append(reason)
        log.warning("%s", reason)

    # -- evaluation (personalised methods, or personalized-eval = true) ---------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid, nodes: dict[int, int] | None = None
    ) -> Iterable[Message]:
        """Evaluate messages of ``server_round`` to ``nodes`` (partition -> node; default: every node
        in an evaluation round), each with only the global entries its evaluation reads (``eval_download``)."""
        if nodes is None:
            if not self.book.on or not self.personal_eval_round(server_round):
                return []
            nodes = self.nodes
        messages = []
        record = self.on_wire(arrays)[1]
        values: dict[str, np.ndarray] | None = None
        self.eval_nodes = dict(nodes)
        for pid in sorted(nodes):
            cfg = ConfigRecord(
                {**dict(config), **self.policy.eval_config(server_round, pid), "server-round": server_round, "partition-id": pid}
            )
            content = RecordDict({"arrays": record, "config": cfg})
            masks = self.policy.eval_download(server_round, pid)
            if masks is not None:
                values = wire.from_record(record) if values is None else values
                content["arrays"], content["arrays-mask"] = wire.encode(values, masks)
            self.count_down(pid, content)
            node, ttl = nodes[pid], self.cfg.round_timeout
            messages.append(Message(content, dst_node_id=node, message_type=MessageType.EVALUATE, group_id=str(server_round), ttl=ttl))
        self.stats.messages["evaluate"] += len(messages)
        self.eval_sent = messages  # the grid gives each its id when it sends them (reply_binding)
        return messages

    def check_eval(self, msg: Message) -> tuple[int, dict[str, float]]:
        """An evaluate reply: only its metrics, its own partition, an accuracy in [0, 1] over 1..test-size samples."""
        checks.record_types(msg.content, {"metrics": MetricRecord})
        return self.check_scores(checks.metrics_of(msg.content), msg.metadata.src_node_id, self.eval_nodes)

    def check_scores(self, metrics: dict[str, float], node: int, nodes: Mapping[int, int]) -> tuple[int, dict[str, float]]:
        """An evaluation's metrics from ``node`` (an evaluate reply's, or a score a train reply carried): its own
        partition among ``nodes``, an accuracy in [0, 1] over 1..test-size samples; raises ReplyError."""
        pid = checks.partition_of(metrics, node, dict(nodes))
        if self.sizes[pid].test == 0 and metrics.get("num-examples") == 0 and "accuracy" not in metrics:
            return pid, metrics  # an empty local test split: no metric over zero samples
        acc = metrics.get("accuracy")
        if acc is None or not 0.0 <= acc <= 1.0:
            raise checks.ReplyError(f"accuracy = {acc!r}, expected a number in [0, 1]")
        n = checks.sample_count(metrics, self.sizes[pid].test, "local test")
        checks.evaluation(metrics, int(n))
        return pid, metrics

    def personal_eval_round(self, server_round: int) -> bool:
        """Rounds that evaluate every client: multiples of personalized-eval-every, and the last
        round (the configured one, or the one the method stops after)."""
        every, last = self.cfg.personalized_eval_every, self.cfg.num_server_rounds
        return server_round % every == 0 or server_round == last or self.policy.finished(server_round)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> EvalResult:  # type: ignore[override]
        """Check the evaluate replies and summarise their accuracies (``result.metrics`` is
        Flower's MetricRecord, None when no client reported one)."""
        got, reasons = self.check_evals(replies)
        return summarise(got, reasons)

    def check_evals(self, replies: Iterable[Message]) -> tuple[dict[int, dict[str, float]], list[str]]:
        """Each evaluate reply's metrics by partition (in reply order), and why any was dropped (each logged)."""
        got: dict[int, dict[str, float]] = {}
        reasons: list[str] = []
        replies, dropped = bind(self.eval_sent, replies)
        reasons.extend(dropped)
        self.count_up(replies, self.eval_nodes)
        for msg in replies:
            if msg.has_error():
                reasons.append(f"node {msg.metadata.src_node_id}: evaluation failed ({msg.error.reason})")
                continue
            try:
                pid, metrics = self.check_eval(msg)
            except Exception as err:  # one node's bad evaluation is that node's failure
                reasons.append(f"node {msg.metadata.src_node_id}: evaluation dropped ({describe(err)})")
                continue
            got[pid] = metrics
        for reason in reasons:
            log.warning("%s", reason)
        return got, reasons

    def summary(self) -> None:
        log.info("MaskedStrategy: method=%s clients=%d server-lr=%s", self.cfg.method, len(self.nodes), self.cfg.server_lr)


def describe(err: BaseException) -> str:
    """One line for failure_reasons: the exception's type and message."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def summarise(client_metrics: dict[int, dict[str, float]], reasons: list[str]) -> EvalResult:
    """The row's evaluation keys from each partition's evaluation (its accuracies averaged in this order)."""
    result = EvalResult(client_metrics=dict(client_metrics), reasons=list(reasons))
    accs = [m["accuracy"] for m in result.client_metrics.values() if "accuracy" in m]  # none from an empty local test split
    if result.reasons:
        result.stats["eval_failures"] = len(result.reasons)
    if not accs:
        return result
    result.stats.update({
        "personalized_accuracy": float(np.mean(accs)), "personalized_accuracy_min": min(accs),
        "personalized_accuracy_max": max(accs), "evaluated_clients": len(accs),
    })  # fmt: skip
    result.metrics = MetricRecord(dict(result.stats))
    return result
