"""FedPeWS (Tastan et al., CPAL 2025): a personalised-subnetwork warmup, then the base method.

Rounds 1..W, W = round(tau * T): every client learns real-valued scores s over the hidden
neurons, samples its neuron mask from Bernoulli(sigmoid(s)) with a straight-through
estimator, and uploads only the weights of its sub-model plus the mask bits. The server
averages each scalar over the clients whose mask holds it (the core's contributor counts)
and keeps each client's last mask, so it can send client i the mean of the others' masks
(``ref_i``, spec D2) for the diversity term. From round W+1 the base method (FedAvg or
FedProx, ``base``) trains the full model. Scores never leave the client; they persist
through the state store. FedPeWS-Fixed (fedpews_fixed.py) swaps the learned masks for
fixed server-assigned blocks.

Why this method has its own local loop: Alg. 1 alternates, on every minibatch, a score step
with the weights frozen and a weight step under a *fresh* mask draw, so the gradient mask
changes at every step; ``train.local_train`` takes one mask for the whole run. The loop
reuses train.py's batches, make_optimizer, masked_step (exact zero update of masked-out
entries under momentum) and proximal_term.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fedapp.batched.memory import ClientMemory
from fedapp.core.config import MAX_LR, RunConfig, key, number_in, one_of, unit_interval
from fedapp.core.masks import NeuronLayout, model_param_masks, neuron_layout
from fedapp.core.state_rounds import Schema
from fedapp.core.train import bernoulli
from fedapp.methods.base import (
    ClientJob,
    ClientPolicy,
    ClientResult,
    Method,
    NodeTask,
    RecordSpec,
    Reply,
    ServerPolicy,
    settings_of,
    train_metrics,
)
from fedapp.methods.metric_names import WARMUP
from fedapp.methods.pews_train import WarmupLoop, masks_to_records, records_to_masks
from fedapp.methods.proximal import proximal_mu
from fedapp.server.reply_checks import ReplyError

log = logging.getLogger("flwr")

REF, MASK, PROBS, SCORES = "pews-ref", "pews-mask", "pews-probs", "pews-scores"


def saturates(s: int) -> bool:
    """Whether float32 sigmoid(s) rounds to exactly 1: the neuron is always kept and its score's gradient is 0."""
    one = np.float32(1)
    return bool(one / (one + np.exp(np.float32(-s))) == one)


# The largest |s0| whose keep probability float32 holds strictly inside (0, 1) (16): beyond it a
# score never moves (sigmoid' = 0), and sigmoid(-s0) = exp(s0) overflows for s0 << 0.
MAX_SCORE = float(next(s for s in range(1, 100) if saturates(s)) - 1)


@dataclass(frozen=True)
class WarmupParams:
    """The warmup's length: FedPeWS-Fixed's only key (its masks are the server's blocks)."""

    warmup_fraction: float = key(0.125, unit_interval, "tau: warmup rounds W = round(tau * num-server-rounds)")


@dataclass(frozen=True)
class PeWSParams(WarmupParams):
    """FedPeWS hyperparameters (spec §3 and the D-decisions of §6): the warmup's length, then the learned masks'."""

    diversity_weight: float = key(5.0, number_in(0, MAX_LR), "lambda: weight of the mask-diversity term (0 disables it)")
    mask_lr: float = key(0.1, number_in(0, MAX_LR, low_open=True), "eta_s: learning rate of the mask-score step")
    mask_init: float = key(
        0.0, number_in(-MAX_SCORE, MAX_SCORE),
        "s0: initial mask score of every hidden neuron (keep probability sigmoid(s0), strictly inside (0, 1) in float32)",
    )  # fmt: skip
    mask_draw: str = key(
        "independent", one_of("independent", "shared", "deterministic-upload"),
        "Bernoulli draws (D4): fresh per score step, weight step and upload; one draw shared by both steps; "
        "or fresh draws with the upload mask 1[sigmoid(s) > 0.5]",
    )  # fmt: skip
    diversity_ref: str = key("masks", one_of("masks", "probs"), "ref_i (D2): mean of the others' last masks, or of their probabilities")
    mask_impl: str = key("weight", one_of("weight", "activation"), "forward masking (D12): weights x*M, or hidden activations")
    mask_extent: str = key(
        "outer", one_of("outer", "rows"),
        "weights a neuron mask covers (D11): in- and out-neuron outer product, or incoming weights and bias only",
    )  # fmt: skip
    ste: str = key("sigmoid", one_of("sigmoid", "identity"), "straight-through scope (D5): keep sigmoid'(s), or pass dL/dm to s")


def warmup_rounds(params: WarmupParams, cfg: RunConfig) -> int:
    """W = round(tau * T), rounding halves up (Python's round() would round 2.5 to 2)."""
    return math.floor(params.warmup_fraction * cfg.num_server_rounds + 0.5)


def mask_stats(masks: list[np.ndarray]) -> dict[str, float]:
    """``mask_density``: mean fraction of hidden neurons kept; ``mask_overlap``: mean pairwise
    Jaccard index |m_i & m_j| / |m_i | m_j| of the clients' neuron masks (0 = disjoint)."""
    if not masks:
        return {}
    out = {"mask_density": float(np.mean([m.mean() for m in masks]))}
    pairs = [(a, b) for i, a in enumerate(masks) for b in masks[i + 1 :]]
    if pairs:
        out["mask_overlap"] = float(np.mean([(a & b).sum() / max(int((a | b).sum()), 1) for a, b in pairs]))
    return out


class PeWSServer(ServerPolicy):
    """Warmup bookkeeping: phase per round, ref_i per client, last masks, mask metrics."""

    def __init__(
        self, cfg: RunConfig, params: WarmupParams, initial: dict[str, np.ndarray], node_info: dict[int, dict[str, Any]], model: nn.Module
    ):
        super().__init__(cfg, params, initial, node_info, model)
        self.layout = neuron_layout(model)
        self.warmup = warmup_rounds(params, cfg)
        self.last: dict[int, np.ndarray] = {}  # pid -> last uploaded neuron mask (or probabilities), flat over h

    def is_warm(self, server_round: int) -> bool:
        return server_round <= self.warmup

    def node_task(self, server_round: int, pid: int) -> NodeTask:
        if not self.is_warm(server_round):
            return NodeTask(config={"phase": "full"})
        task = NodeTask(config={"phase": "warmup", "pews-seen": int(pid in self.last)})
        if self.params.diversity_weight > 0:
            task.records[REF] = dict(zip(self.layout.hidden_names, self.layout.split(self.reference(pid)), strict=True))
        return task

    def reply_records(self, server_round: int, pid: int) -> dict[str, RecordSpec]:
        """Warmup replies: the uploaded neuron mask as packed bits per hidden layer, and (D2 = probs)
        the keep probabilities per hidden neuron."""
        if not self.is_warm(server_round):
            return {}
        out: dict[str, RecordSpec] = {MASK: {layer.name: (((layer.out_width + 7) // 8,), "uint8") for layer in self.layout.hidden}}
        if self.params.diversity_ref == "probs":
            out[PROBS] = {layer.name: ((layer.out_width,), "float32") for layer in self.layout.hidden}
        return out

    def check_records(self, server_round: int, pid: int, records: dict[str, dict[str, np.ndarray]]) -> None:
        """Keep probabilities are sigmoid outputs, in [0, 1]: any other value would enter the other
        clients' diversity reference (their warm-up masks) as it stands."""
        for name, probs in records.get(PROBS, {}).items():
            bad = (probs < 0) | (probs > 1)
            if bad.any():
                raise ReplyError(
                    f"{PROBS}/{name}: {int(bad.sum())} keep probabilities outside [0, 1] (e.g. {float(probs[bad][0]):g}); reply refused"
                )

    def reference(self, pid: int) -> np.ndarray:
        """ref_i: mean of the other clients' last masks; sigmoid(s0) before any is known (D2)."""
        known = [m for j, m in sorted(self.last.items()) if j != pid]
        if not known:
            return np.full(self.layout.total, 1.0 / (1.0 + math.exp(-self.params.mask_init)), np.float32)
        return np.mean(known, axis=0).astype(np.float32)

    def reply_mask(self, reply: Reply) -> np.ndarray | None:
        """The neuron mask a reply declares (flat bool over h), or None if it is missing or malformed."""
        try:
            return records_to_masks(reply.records[MASK], self.layout)
        except (KeyError, ValueError) as err:
            log.warning("round reply of partition %d has no usable %s record (%s); not used as diversity reference", reply.pid, MASK, err)
            return None

    def state(self) -> dict[str, np.ndarray]:
        """The clients' last masks (the diversity reference), so a resumed warmup continues exactly."""
        return {f"pews-last/{pid}": m for pid, m in self.last.items()}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.last = {int(k.split("/", 1)[1]): v.astype(np.float32) for k, v in state.items() if k.startswith("pews-last/")}

    def after_round(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        if not self.is_warm(server_round):
            return {WARMUP: False}
        masks: list[np.ndarray] = []
        for reply in replies:
            mask = self.reply_mask(reply)
            if mask is None:
                continue
            masks.append(mask)
            if self.params.diversity_ref == "masks":
                self.last[reply.pid] = mask.astype(np.float32)
            elif PROBS in reply.records:
                self.last[reply.pid] = np.concatenate([reply.records[PROBS][n].astype(np.float32) for n in self.layout.hidden_names])
        return {WARMUP: True, **mask_stats(masks)}


class PeWSClient(ClientPolicy):
    """Warmup rounds: alternate score and weight steps, upload the sub-model and mask bits.
    Full rounds: the base method (ClientPolicy is FedAvg, or FedProx when ``base=fedprox``)."""

    def chunk_memory(self) -> ClientMemory:
        return dataclasses.replace(super().chunk_memory(), warmup=True)  # sized for its warm-up chunks, the larger

    def train(self, job: ClientJob) -> ClientResult:
        if job.config.get("phase") != "warmup":
            return super().train(job)
        p: PeWSParams = job.params
        layout = neuron_layout(job.model)
        scores = self.load_scores(job, layout)
        ref = self.reference(job, layout)
        mu = proximal_mu(self.cfg)
        loop = WarmupLoop(job.model, layout, settings_of(self.cfg), p.mask_impl, mu, p.mask_extent, p.ste)
        x, y = job.tensors()
        pews = {"ref": ref, "weight": p.diversity_weight, "lr": p.mask_lr, "shared": p.mask_draw == "shared"}
        stats, scores = loop.run(x, y, scores, pews, job.gen)
        theta = torch.sigmoid(scores)
        probs = theta.cpu().numpy()
        upload = probs > 0.5 if p.mask_draw == "deterministic-upload" else bernoulli(theta, job.gen).cpu().numpy().astype(bool)
        self.save_scores(job, layout, scores.cpu().numpy())
        records = {MASK: masks_to_records(upload, layout)}
        if p.diversity_ref == "probs":
            records[PROBS] = dict(zip(layout.hidden_names, layout.split(probs.astype(np.float32)), strict=True))
        metrics = {**train_metrics(stats), "mask-density": float(upload.mean())}
        return ClientResult(metrics, masks=model_param_masks(job.model, layout.split(upload), p.mask_extent), records=records)

    def state_schema(self, model: nn.Module, initial: Mapping[str, np.ndarray]) -> Schema:
        """One float32 score per hidden neuron and layer."""
        layout = neuron_layout(model)
        widths = zip(layout.hidden_names, layout.widths, strict=True)
        return {SCORES: {n: ((width,), np.dtype(np.float32)) for n, width in widths}}

    def load_scores(self, job: ClientJob, layout: NeuronLayout) -> torch.Tensor:
        """s_i from the state store; s0 on the first warmup participation (or if it was lost)."""
        state = job.store.load(job.pid, SCORES)
        pieces = [state.get(n) for n in layout.hidden_names]
        if all(piece is not None and piece.shape == (layer.out_width,) for piece, layer in zip(pieces, layout.hidden, strict=True)):
            return torch.from_numpy(np.concatenate(pieces).astype(np.float32)).to(job.device)  # type: ignore[arg-type]
        if job.config.get("pews-seen"):
            log.warning("partition %d: mask scores missing from the state store (restarted node?); re-initialising to s0", job.pid)
        return torch.full((layout.total,), float(job.params.mask_init), device=job.device)

    def save_scores(self, job: ClientJob, layout: NeuronLayout, scores: np.ndarray) -> None:
        job.store.save(job.pid, SCORES, dict(zip(layout.hidden_names, layout.split(scores), strict=True)))

    def reference(self, job: ClientJob, layout: NeuronLayout) -> torch.Tensor | None:
        if job.params.diversity_weight <= 0:
            return None
        rec = job.records.get(REF)
        if rec is None:
            raise ValueError(f"warmup round with diversity-weight > 0 but no {REF!r} record in the message")
        pieces = [np.asarray(rec[n], np.float32) for n in layout.hidden_names]
        return torch.from_numpy(np.concatenate(pieces)).to(job.device)


METHOD = Method("fedpews", PeWSServer, PeWSClient, PeWSParams)
