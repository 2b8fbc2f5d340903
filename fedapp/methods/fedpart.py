"""FedPart (../shared/specs/fedpart.md): every client trains and uploads one layer group per round.

Server: the round's schedule entry (a group index, or FULL for a full-network round)
goes to every client as ``group-index``; replies carry only that group's tensors, so the
masked mean changes only that group. Client: parameters outside the group get
``requires_grad = False`` (autograd stops at the shallowest trained group, a real
backward saving), a fresh optimizer sees only the group, and the upload is the group.
BatchNorm running statistics never travel for training (spec P7): each client keeps
its own in the state store. The server evaluates the global parameters with partition
0's statistics (P8), which that client sends in a ``bn-stats`` record counted as
evaluation bytes, not upload. ``cycles = 0`` is the FNU baseline with the same BN handling (P4).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedapp.core.config import MAX_ROUNDS, ConfigError, RunConfig, integer_in, key, one_of
from fedapp.core.device import host_arrays, load_host_arrays
from fedapp.core.masks import LayerGroup, layer_groups
from fedapp.core.state_rounds import Schema
from fedapp.data import dataset_for
from fedapp.methods.accounting import group_macs, group_sizes, round_macs, round_params
from fedapp.methods.base import (
    ClientJob,
    ClientPolicy,
    ClientResult,
    Method,
    NodeTask,
    RecordSpec,
    Reply,
    ServerPolicy,
    shaped_like,
    train_metrics,
)
from fedapp.methods.layer_schedule import FULL, ORDERS, schedule, schedule_length
from fedapp.models import build_model

log = logging.getLogger("flwr")

BN_RECORD = "bn-stats"  # reply record: BatchNorm statistics for the server's evaluation
BN_STATE = "bn-stats"  # state key: this client's own BatchNorm statistics
REFERENCE = 0  # partition whose BatchNorm statistics the server evaluates with


@dataclass(frozen=True)
class FedPartParams:
    warmup_rounds: int = key(5, integer_in(0, MAX_ROUNDS), "FedPart: full-network rounds before the first cycle (W)")
    rounds_per_layer: int = key(2, integer_in(1, MAX_ROUNDS), "FedPart: consecutive rounds each layer group trains within a cycle (R/L)")
    cycles: int = key(5, integer_in(0, MAX_ROUNDS), "FedPart: sweeps over all layer groups (C); 0 = the full-network baseline")
    full_rounds_between_cycles: int = key(5, integer_in(0, MAX_ROUNDS), "FedPart: full-network rounds between consecutive cycles (B)")
    layer_order: str = key("sequential", one_of(*ORDERS), "FedPart: group order within a cycle; random draws a group per round")
    bn_eval_stats: str = key("reference", one_of("reference", "mean"), "FedPart: BN statistics for global evaluation")


def model_structure(cfg: RunConfig) -> tuple[nn.Module, tuple[int, ...], list[LayerGroup]]:
    """The run's model on the meta device (no memory, no RNG use), its input shape and groups."""
    ds = dataset_for(cfg)
    with torch.device("meta"):
        model = build_model(cfg, ds.in_shape, ds.num_classes)
    return model, ds.in_shape, layer_groups(model)


def plan_of(cfg: RunConfig, p: FedPartParams, num_groups: int) -> list[int]:
    """The run's schedule; ``num-server-rounds`` must equal its length (spec P2)."""
    t = schedule_length(num_groups, p.cycles, p.warmup_rounds, p.full_rounds_between_cycles, p.rounds_per_layer)
    if cfg.num_server_rounds != t:
        raise ConfigError(
            f"run-config key 'num-server-rounds' = {cfg.num_server_rounds} does not match the FedPart schedule: "
            f"warmup-rounds {p.warmup_rounds} + cycles {p.cycles} x {num_groups} layer groups of model {cfg.model!r} "
            f"x rounds-per-layer {p.rounds_per_layer} + {max(p.cycles - 1, 0)} x full-rounds-between-cycles "
            f"{p.full_rounds_between_cycles} = {t}; set num-server-rounds = {t}"
        )
    return schedule(num_groups, p.cycles, p.warmup_rounds, p.full_rounds_between_cycles, p.rounds_per_layer, p.layer_order, cfg.seed)


def train_only(model: nn.Module, group_index: int) -> set[str]:
    """Freeze every parameter outside layer group ``group_index`` (FULL: none); return the trainable names."""
    groups = layer_groups(model)
    if not FULL <= group_index < len(groups):
        raise ValueError(f"group-index {group_index} is outside -1..{len(groups) - 1} for this model's {len(groups)} layer groups")
    names = {n for n, _ in model.named_parameters()}
    trainable = names if group_index == FULL else set(groups[group_index].params)
    for n, p in model.named_parameters():
        p.requires_grad_(n in trainable)
    return trainable


class FedPartServer(ServerPolicy):
    eval_records = frozenset({BN_RECORD})

    def __init__(self, cfg: RunConfig, params: FedPartParams, initial: dict[str, np.ndarray], node_info: dict[int, Any], model: nn.Module):
        super().__init__(cfg, params, initial, node_info, model)
        self.groups = layer_groups(model)
        self.sizes = group_sizes(model, self.groups)
        self.macs = group_macs(model, dataset_for(cfg).in_shape, self.groups)
        self.plan = plan_of(cfg, params, len(self.groups))
        self.buffers = {n: initial[n] for n, _ in model.named_buffers()}
        self.eval_buffers: dict[str, np.ndarray] = {}

    @classmethod
    def check_config(cls, cfg: RunConfig, params: FedPartParams) -> None:
        plan_of(cfg, params, len(model_structure(cfg)[2]))  # num-server-rounds must equal the schedule

    def reply_records(self, server_round: int, pid: int) -> dict[str, RecordSpec]:
        if not (self.params.bn_eval_stats == "mean" or pid == REFERENCE):
            return {}
        return {BN_RECORD: {n: (b.shape, b.dtype.name) for n, b in self.buffers.items()}}

    def entry(self, server_round: int) -> int:
        return self.plan[server_round - 1]

    def node_task(self, server_round: int, pid: int) -> NodeTask:
        send = self.params.bn_eval_stats == "mean" or pid == REFERENCE
        return NodeTask(config={"group-index": self.entry(server_round), "send-bn-stats": send})

    def upload_allowed(self, server_round: int, pid: int, task: NodeTask) -> dict[str, np.ndarray] | None:
        """The round's layer group (every parameter in a full-network round); BatchNorm statistics never."""
        g = self.entry(server_round)
        names = [n for n, _ in self.model.named_parameters()] if g == FULL else self.groups[g].params
        return {n: np.ones(self.initial[n].shape, bool) for n in names}

    def after_round(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        self._update_eval_buffers(replies)
        g = self.entry(server_round)
        samples = sum(self._samples(r.metrics) for r in replies)
        return {
            "trained_group": g,
            "trained_group_name": "all" if g == FULL else self.groups[g].name,
            "trained_params": round_params(g, self.sizes),
            "train_macs": round_macs(g, self.macs) * samples,
        }

    def _samples(self, metrics: dict[str, float]) -> float:
        """Training samples a client processed this round (steps mode: an upper bound)."""
        if self.cfg.local_steps > 0:
            return metrics.get("steps", 0.0) * self.cfg.batch_size
        return metrics.get("num-examples", 0.0) * self.cfg.local_epochs

    def _update_eval_buffers(self, replies: list[Reply]) -> None:
        stats = []
        for r in replies:
            got = r.records.get(BN_RECORD)
            if got is None:
                continue
            if set(got) != set(self.buffers) or any(got[k].size != v.size for k, v in self.buffers.items()):
                log.warning("partition %d sent BatchNorm statistics that do not match the model; ignored", r.pid)
                continue
            got = {k: got[k].reshape(v.shape) for k, v in self.buffers.items()}  # the wire turns 0-d arrays into 1-d
            if self.params.bn_eval_stats == "reference" and r.pid == REFERENCE:
                self.eval_buffers = got
            stats.append(got)
        if self.params.bn_eval_stats == "mean" and stats:
            self.eval_buffers = {k: np.mean([s[k] for s in stats], axis=0).astype(v.dtype) for k, v in self.buffers.items()}

    def eval_arrays(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**arrays, **self.eval_buffers}


class FedPartClient(ClientPolicy):
    def state_schema(self, model: nn.Module, initial: Mapping[str, np.ndarray]) -> Schema:
        return {BN_STATE: shaped_like(initial, (n for n, _ in model.named_buffers()))}

    def train(self, job: ClientJob) -> ClientResult:
        g = int(job.config.get("group-index", FULL))
        own = job.store.load(job.pid, BN_STATE)  # this client's BatchNorm statistics; the global copies are the server's
        if own:
            load_host_arrays(job.model, own, strict=False)
        trainable = train_only(job.model, g)
        stats = self.fit(job)
        buffers = host_arrays(dict(job.model.named_buffers()))
        job.store.save(job.pid, BN_STATE, buffers)
        records = {BN_RECORD: buffers} if job.config.get("send-bn-stats") else {}
        metrics = {**train_metrics(stats), "group-index": g}
        return ClientResult(metrics=metrics, upload=trainable, records=records)


METHOD = Method("fedpart", FedPartServer, FedPartClient, FedPartParams)
