"""Clients that keep a personal model: a full local copy plus a personal mask.

Shared by FedSelect (growing mask), FedPer (personal head) and Local (everything
personal). Per client the state store holds the full model θ_k (parameters and
BatchNorm buffers), the mask used this round (``m_cur``) and the mask for the next
round (``m_next``), masks as packed bits; 1 = personal. Each round:

    θ_k[¬m_cur] ← received global values        (parameters only; buffers stay local)
    m_cur ← m_next;  train;  m_next ← next_mask(...)
    upload θ_k at ¬m_cur (values + packed mask); personal values never leave

The server half remembers each client's last uploaded mask and sends it only those
global coordinates (so download shrinks with the mask, as upload does); the server
averages each coordinate over the clients for which it is global, and a coordinate
that is personal everywhere keeps its value (aggregate.masked_mean). Evaluation uses
the model the client holds after its local training (spec fedselect F14).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from fedapp.core import wire
from fedapp.core.device import host_arrays, load_host_arrays
from fedapp.core.state_rounds import Schema
from fedapp.core.train import TrainStats
from fedapp.methods.base import ClientJob, ClientPolicy, ClientResult, NodeTask, Reply, ServerPolicy, local_test_scores, train_metrics

log = logging.getLogger("flwr")

Masks = dict[str, np.ndarray]  # parameter name -> bool array shaped like it; True = personal


def eligible(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Trainable parameters (weights, biases, BN affine): the tensors that carry masks."""
    return {n: tuple(p.shape) for n, p in model.named_parameters() if p.requires_grad}


def personal_fraction(masks: Masks) -> float:
    total = sum(m.size for m in masks.values())
    return sum(int(m.sum()) for m in masks.values()) / total if total else 0.0


def pack(masks: Masks) -> dict[str, np.ndarray]:
    return {n: np.packbits(m.reshape(-1)) for n, m in masks.items()}


def unpack(packed: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> Masks:
    return {n: np.unpackbits(packed[n], count=int(np.prod(s))).astype(bool).reshape(s) for n, s in shapes.items()}


THETA, MASK_CURRENT, MASK_NEXT, SAVED_ROUND = "theta", "mask-current", "mask-next", "saved-round"  # state keys, saved together


class PersonalState:
    """θ_k, m_cur, m_next and the round they were saved in: four state records, saved together."""

    def __init__(self, theta: dict[str, np.ndarray], m_cur: Masks, m_next: Masks, saved_round: int):
        self.theta, self.m_cur, self.m_next, self.saved_round = theta, m_cur, m_next, saved_round

    @classmethod
    def load(cls, job: ClientJob) -> PersonalState | None:
        saved = job.store.load(job.pid, SAVED_ROUND)
        if not saved:
            return None
        shapes, load = eligible(job.model), job.store.load
        m_cur, m_next = unpack(load(job.pid, MASK_CURRENT), shapes), unpack(load(job.pid, MASK_NEXT), shapes)
        return cls(load(job.pid, THETA), m_cur, m_next, int(saved["round"].reshape(-1)[0]))

    def save(self, job: ClientJob) -> None:
        job.store.save_all(job.pid, {
            THETA: self.theta, MASK_CURRENT: pack(self.m_cur), MASK_NEXT: pack(self.m_next),
            SAVED_ROUND: {"round": np.array([self.saved_round], np.int64)},
        })  # fmt: skip


class PersonalClient(ClientPolicy):
    """Merge -> switch masks -> local update -> next mask -> upload the global part.

    Subclasses choose the first mask, the local update and how the mask grows.
    """

    def state_schema(self, model: nn.Module, initial: Mapping[str, np.ndarray]) -> Schema:
        """θ_k is a whole state dict; each mask, its parameter's entries as packed bits."""
        packed = {n: ((-(-int(np.prod(s)) // 8),), np.dtype(np.uint8)) for n, s in eligible(model).items()}
        return {
            THETA: {n: (a.shape, a.dtype) for n, a in initial.items()}, MASK_CURRENT: packed, MASK_NEXT: packed,
            SAVED_ROUND: {"round": ((1,), np.dtype(np.int64))},
        }  # fmt: skip

    def initial_mask(self, model: nn.Module) -> Masks:
        return {n: np.zeros(s, bool) for n, s in eligible(model).items()}

    def local_update(self, job: ClientJob, m_cur: Masks) -> TrainStats:
        return self.fit(job)

    def next_mask(self, job: ClientJob, m_cur: Masks, start: dict[str, torch.Tensor]) -> Masks:
        """The mask for the next round, given the parameters at the start of training (on the device)."""
        return m_cur

    def restore(self, job: ClientJob) -> Masks:
        """Write θ_k into ``job.model`` with this round's global values merged in; return m_cur."""
        state = PersonalState.load(job)
        if state is not None and state.saved_round >= job.server_round:
            log.warning(
                "client %d: stored state is from round %d, not before %d: an earlier run's; starting afresh",
                job.pid,
                state.saved_round,
                job.server_round,
            )
            state = None
        if state is None:
            first = self.initial_mask(job.model)
            if all((job.received[n] | m).all() for n, m in first.items()):  # every entry not sent is personal anyway (Local)
                return first
            # State lost (a new device, a wiped state-dir): what the server did not send stays
            # personal, so the upload stays within the global part the server holds for this client.
            log.warning("client %d: no stored state but the server sent only part of the model (state lost?); "
                        "the entries not sent stay personal, from w0", job.pid)  # fmt: skip
            return {n: m | ~job.received[n] for n, m in first.items()}
        received = host_arrays(job.model.state_dict())
        theta = dict(state.theta)
        for name, m_old in state.m_cur.items():
            take = ~m_old & job.received[name]
            theta[name] = np.where(take, received[name], theta[name])
        load_host_arrays(job.model, theta)
        return state.m_next

    def train(self, job: ClientJob) -> ClientResult:
        m_cur = self.restore(job)
        start = {n: p.detach().clone() for n, p in job.model.named_parameters() if n in m_cur}
        stats = self.local_update(job, m_cur)
        m_next = self.next_mask(job, m_cur, start)
        PersonalState(host_arrays(job.model.state_dict()), m_cur, m_next, job.server_round).save(job)
        metrics: dict[str, float] = {**train_metrics(stats), "personal-fraction": personal_fraction(m_cur)}
        metrics["personal-fraction-next"] = personal_fraction(m_next)
        return ClientResult(metrics=metrics, masks={n: ~m for n, m in m_cur.items()}, upload=set(m_cur))

    def evaluate(self, job: ClientJob) -> dict[str, float]:
        """Accuracy of the client's own model (as left by its last local training)."""
        state = PersonalState.load(job)
        if state is not None and state.saved_round <= job.server_round:
            load_host_arrays(job.model, state.theta)
        return local_test_scores(job.model, job)


class PersonalServer(ServerPolicy):
    """Send each client only the global coordinates of its last uploaded mask; evaluate
    every client's own model each round; report the mean personal fraction."""

    personalized_eval = True
    score_kind = "trained"  # its own model; before its first training, the global model (so an evaluate reply's score does not stand)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.global_masks: dict[int, dict[str, np.ndarray]] = {}

    def node_task(self, server_round: int, pid: int) -> NodeTask:
        return NodeTask(download_masks=self.global_masks.get(pid))

    def state(self) -> dict[str, np.ndarray]:
        """Each client's last upload mask (packed bits): a resumed run sends what this one would."""
        return {f"global-mask/{pid}/{n}": np.packbits(m.reshape(-1)) for pid, masks in self.global_masks.items() for n, m in masks.items()}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.global_masks = {}
        for key, bits in state.items():
            _, pid, name = key.split("/", 2)
            shape = self.initial[name].shape
            self.global_masks.setdefault(int(pid), {})[name] = np.unpackbits(bits, count=int(np.prod(shape))).astype(bool).reshape(shape)

    def after_round(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        for r in replies:
            self.global_masks[r.pid] = wire.dense_masks(r.contribution, self.initial)
        fractions = [r.metrics["personal-fraction"] for r in replies if "personal-fraction" in r.metrics]
        return {"personal_fraction": float(np.mean(fractions))} if fractions else {}
