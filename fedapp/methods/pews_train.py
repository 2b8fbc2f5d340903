"""FedPeWS local warmup: one client's round, per minibatch a score step then a weight step (Alg. 1).

The steps' math (masked forward, straight-through mask, score and weight losses) is in
``pews_steps.py``, shared with the batched kernel (``pews_kernel.py``). ``WarmupLoop.run``
goes through the engine's park point, so the in-process engine can train many clients'
warm-ups together; anywhere else it is :meth:`WarmupLoop.run_here`.

Masks here are flat float 0/1 vectors over all hidden neurons (``NeuronLayout.total``),
cut per hidden layer with ``layout.split``-like slicing.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import nn

from fedapp.batched.seam import park
from fedapp.core.masks import NeuronLayout
from fedapp.core.train import (
    TrainSettings,
    TrainStats,
    batches_on,
    bernoulli,
    loss_accumulator,
    make_optimizer,
    masked_step,
    needs_restore,
    uniform,
)
from fedapp.methods.pews_kernel import WarmupCall
from fedapp.methods.pews_steps import Tensors, WarmupSpec, score_loss, weight_loss


class WarmupLoop:
    """One client's warmup round: per minibatch, Procedure I (score step, weights frozen)
    then Procedure II (weight step under a mask drawn from the updated scores, same batch)."""

    def __init__(
        self,
        model: nn.Module,
        layout: NeuronLayout,
        settings: TrainSettings,
        impl: str = "weight",
        prox_mu: float = 0.0,
        extent: str = "outer",
        ste: str = "sigmoid",
    ):
        self.model = model
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        shapes = tuple((n, tuple(p.shape)) for n, p in self.named)
        self.spec = WarmupSpec(settings, layout, impl, prox_mu, extent, ste == "identity", shapes)
        self.opt = make_optimizer([p for _, p in self.named], settings)
        self.restore = needs_restore(settings)
        self.anchor = {n: p.detach().clone() for n, p in self.named}
        self.loss_fn = nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pm: Tensors | None = None) -> torch.Tensor:
        """f(x_w * expand(mask); x) for weight masking, or activation masking (``spec.impl``)."""
        return self.spec.forward(self.model, dict(self.named), {}, x, mask, pm)

    def score_step(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        scores: torch.Tensor,
        ref: torch.Tensor | None,
        weight: float,
        lr: float,
        gen: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Procedure I: s <- s - lr * grad_s [CE(f(x * M(m~))) - lambda * div]. Returns the new
        scores and the binary mask drawn for this step."""
        s = scores.detach().requires_grad_()
        u = uniform(s.shape, gen, s.device)
        loss, drawn = score_loss(
            s, u, lambda m: self.loss_fn(self.forward(x, m), y), ref if weight > 0 else None, weight, self.spec.ste_identity
        )
        (grad,) = torch.autograd.grad(loss, s)
        return (s - lr * grad).detach(), drawn

    def weight_step(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Procedure II: x <- x - lr * M' * grad_x [CE(f(x * M')) + (mu/2)||M' * (x - x_start)||^2].
        Returns the task loss as a tensor (read by the caller once per round, not per step)."""
        pm = self.spec.param_masks(mask)
        self.opt.zero_grad(set_to_none=True)
        task = self.loss_fn(self.forward(x, mask, pm), y)
        weight_loss(task, self.spec.mu, dict(self.named), self.anchor, pm).backward()
        masked_step(self.opt, self.named, {n: m.detach() for n, m in pm.items()}, self.restore)
        return task.detach()

    def run(
        self, x: torch.Tensor, y: torch.Tensor, scores: torch.Tensor, pews: dict[str, Any], gen: torch.Generator
    ) -> tuple[TrainStats, torch.Tensor]:
        """All local steps of a warmup round; ``pews`` holds ref, weight, lr and shared (bool).
        Through the engine's park point (``seam.park``): :meth:`run_here`, or the batched kernel."""
        out: tuple[TrainStats, torch.Tensor] = park(WarmupCall(self, x, y, scores, pews, gen))
        return out

    def run_here(
        self, x: torch.Tensor, y: torch.Tensor, scores: torch.Tensor, pews: dict[str, Any], gen: torch.Generator
    ) -> tuple[TrainStats, torch.Tensor]:
        """:meth:`run` for this one client."""
        start = time.perf_counter()
        self.model.train()
        total, steps = loss_accumulator(x.device), 0
        for idx in batches_on(x.device, x.shape[0], self.spec.settings, gen):
            xb, yb = x[idx], y[idx]
            scores, drawn = self.score_step(xb, yb, scores, pews["ref"], pews["weight"], pews["lr"], gen)
            mask = drawn if pews["shared"] else bernoulli(torch.sigmoid(scores), gen)
            total += self.weight_step(xb, yb, mask)
            steps += 1
        return TrainStats(float(total) / max(steps, 1), int(x.shape[0]), steps, time.perf_counter() - start), scores


def masks_to_records(flat: np.ndarray, layout: NeuronLayout) -> dict[str, np.ndarray]:
    """A flat neuron mask over all hidden layers as its wire record (NeuronLayout.pack_neurons)."""
    return layout.pack_neurons(layout.split(flat))


def records_to_masks(record: dict[str, np.ndarray], layout: NeuronLayout) -> np.ndarray:
    """The flat neuron mask of a wire record (NeuronLayout.unpack_neurons)."""
    return np.concatenate(layout.unpack_neurons(record))
