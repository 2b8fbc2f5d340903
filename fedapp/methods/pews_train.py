"""FedPeWS local warmup: masked forward passes, the straight-through mask, the diversity
term, and the per-minibatch alternation of a score step and a weight step (Alg. 1).

Masks here are flat float 0/1 vectors over all hidden neurons (``NeuronLayout.total``),
cut per hidden layer with ``layout.split``-like slicing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from fedapp.core.masks import NeuronLayout, torch_param_masks
from fedapp.core.train import (
    TrainSettings,
    TrainStats,
    batches_on,
    bernoulli,
    loss_accumulator,
    make_optimizer,
    masked_step,
    needs_restore,
    proximal_term,
)


def split(layout: NeuronLayout, flat: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.split(flat, list(layout.widths)))


def ste_mask(scores: torch.Tensor, gen: torch.Generator, identity: bool = False) -> torch.Tensor:
    """Bernoulli(sigmoid(s)) sample with a straight-through gradient (spec D5): forward value
    bern(theta); backward d/ds = dL/dm * sigmoid'(s), or dL/dm itself when ``identity``.
    The draw comes from the CPU generator ``gen`` (train.bernoulli), wherever ``scores`` is."""
    theta = torch.sigmoid(scores)
    through = scores if identity else theta
    return bernoulli(theta.detach(), gen) + through - through.detach()


def diversity_term(scores: torch.Tensor, ref: torch.Tensor, weight: float) -> torch.Tensor:
    """-lambda * sum_h (sigmoid(s) - ref)^2 (Eq. 6): it enters the score loss with a minus
    sign, so a descent step pushes sigmoid(s) away from the other clients' masks."""
    return -weight * ((torch.sigmoid(scores) - ref) ** 2).sum()


def _mask_input(mask: torch.Tensor, inp: torch.Tensor) -> torch.Tensor:
    if inp.dim() == 2:  # Linear input, possibly a flattened conv map: channel c owns a run of features
        return inp * mask.repeat_interleave(inp.shape[1] // mask.numel())
    return inp * mask.view(1, -1, *([1] * (inp.dim() - 2)))


@contextmanager
def input_masks(model: nn.Module, layout: NeuronLayout, masks: list[torch.Tensor]) -> Iterator[None]:
    """Multiply each hidden layer's output, as the next weight layer reads it, by its mask
    (activation masking). For 0/1 masks the forward pass and the weight gradients equal
    those of weight masking x * M (spec §2): an off neuron feeds 0 to the next layer and
    gets no gradient on its incoming weights."""
    modules = dict(model.named_modules())
    handles = [
        modules[layer.name].register_forward_pre_hook(lambda _m, args, mask=mask: (_mask_input(mask, args[0]), *args[1:]))
        for layer, mask in zip(layout.layers[1:], masks, strict=True)
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


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
        self.model, self.layout, self.settings, self.impl, self.mu = model, layout, settings, impl, prox_mu
        self.extent, self.ste_identity = extent, ste == "identity"
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.shapes = {n: tuple(p.shape) for n, p in self.named}
        self.opt = make_optimizer([p for _, p in self.named], settings)
        self.restore = needs_restore(settings)
        self.anchor = {n: p.detach().clone() for n, p in self.named}
        self.loss_fn = nn.CrossEntropyLoss()

    def param_masks(self, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """expand(mask): parameter masks over ``self.extent`` (differentiable in ``mask``)."""
        return torch_param_masks(self.layout, split(self.layout, mask), self.shapes, self.extent)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pm: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """f(x_w * expand(mask); x) for weight masking, or activation masking (``impl``).
        ``pm``: expand(mask) when the caller already has it (the weight step needs it too)."""
        if self.impl == "activation":
            with input_masks(self.model, self.layout, split(self.layout, mask)):
                return self.model(x)  # type: ignore[no-any-return]
        pm = self.param_masks(mask) if pm is None else pm
        params = {n: p * pm[n] if n in pm else p for n, p in self.named}
        return functional_call(self.model, params, (x,))  # type: ignore[no-any-return]

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
        m = ste_mask(s, gen, self.ste_identity)
        loss = self.loss_fn(self.forward(x, m), y)
        if ref is not None and weight > 0:
            loss = loss + diversity_term(s, ref, weight)
        (grad,) = torch.autograd.grad(loss, s)
        return (s - lr * grad).detach(), m.detach().round()

    def weight_step(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Procedure II: x <- x - lr * M' * grad_x [CE(f(x * M')) + (mu/2)||M' * (x - x_start)||^2].
        Returns the task loss as a tensor (read by the caller once per round, not per step)."""
        pm = self.param_masks(mask)
        self.opt.zero_grad(set_to_none=True)
        task = self.loss_fn(self.forward(x, mask, pm), y)
        loss = task + proximal_term(self.mu, self.anchor, pm)(self.model) if self.mu > 0 else task
        loss.backward()
        masked_step(self.opt, self.named, {n: m.detach() for n, m in pm.items()}, self.restore)
        return task.detach()

    def run(
        self, x: torch.Tensor, y: torch.Tensor, scores: torch.Tensor, pews: dict[str, Any], gen: torch.Generator
    ) -> tuple[TrainStats, torch.Tensor]:
        """All local steps of a warmup round; ``pews`` holds ref, weight, lr and shared (bool).
        Inside the in-process engine's batched executor its runner trains this client together
        with others (``fedapp.batched.pews``), else :meth:`run_here`."""
        runner = _RUNNER.get()
        return self.run_here(x, y, scores, pews, gen) if runner is None else runner(self, x, y, scores, pews, gen)

    def run_here(
        self, x: torch.Tensor, y: torch.Tensor, scores: torch.Tensor, pews: dict[str, Any], gen: torch.Generator
    ) -> tuple[TrainStats, torch.Tensor]:
        """:meth:`run` for this one client."""
        start = time.perf_counter()
        self.model.train()
        total, steps = loss_accumulator(x.device), 0
        for idx in batches_on(x.device, x.shape[0], self.settings, gen):
            xb, yb = x[idx], y[idx]
            scores, drawn = self.score_step(xb, yb, scores, pews["ref"], pews["weight"], pews["lr"], gen)
            mask = drawn if pews["shared"] else bernoulli(torch.sigmoid(scores), gen)
            total += self.weight_step(xb, yb, mask)
            steps += 1
        return TrainStats(float(total) / max(steps, 1), int(x.shape[0]), steps, time.perf_counter() - start), scores


_RUNNER: ContextVar[Callable[..., tuple[TrainStats, torch.Tensor]] | None] = ContextVar("fedapp_warmup_runner", default=None)


def use_warmup_runner(fn: Callable[..., tuple[TrainStats, torch.Tensor]]) -> None:
    """Make ``fn(loop, x, y, scores, pews, gen)`` this thread's (context's) warm-up runner (the batched executor's lanes)."""
    _RUNNER.set(fn)


def masks_to_records(flat: np.ndarray, layout: NeuronLayout) -> dict[str, np.ndarray]:
    """A flat neuron mask over all hidden layers as its wire record (NeuronLayout.pack_neurons)."""
    return layout.pack_neurons(layout.split(flat))


def records_to_masks(record: dict[str, np.ndarray], layout: NeuronLayout) -> np.ndarray:
    """The flat neuron mask of a wire record (NeuronLayout.unpack_neurons)."""
    return np.concatenate(layout.unpack_neurons(record))
