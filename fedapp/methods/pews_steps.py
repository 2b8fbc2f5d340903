"""FedPeWS warm-up math, written once: the masked forward pass, the straight-through mask, the
score loss (Procedure I) and the weight loss (Procedure II) as pure functions of their tensors.

The one-client loop (``pews_train.WarmupLoop``) calls them on one client's tensors and its
``nn.CrossEntropyLoss``; the batched kernel (``pews_kernel.py``) calls the same functions under
``vmap(grad(...))`` on each client's slice of the stacked tensors, with the minibatch's
weighted cross-entropy (padding rows weigh 0), as FedJAX's ``for_each_client`` maps one
client's step function over many. Only the task loss and where the uniforms come from differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call

from fedapp.core.masks import NeuronLayout, torch_param_masks
from fedapp.core.train import TrainSettings, proximal_loss

Tensors = dict[str, torch.Tensor]


def split(layout: NeuronLayout, flat: torch.Tensor) -> list[torch.Tensor]:
    return list(torch.split(flat, list(layout.widths)))


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


@dataclass(frozen=True)
class WarmupSpec:
    """What a warm-up round's steps depend on besides tensors (and what clients of one batched chunk share)."""

    settings: TrainSettings
    layout: NeuronLayout
    impl: str  # "weight" (x * M) or "activation" (hidden outputs masked)
    mu: float  # proximal term's weight (0: none)
    extent: str  # "outer" or "rows": which weights a neuron mask covers
    ste_identity: bool  # straight-through: dL/dm itself instead of dL/dm * sigmoid'(s)
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # trainable parameters' names and shapes, in model order

    def param_masks(self, mask: torch.Tensor) -> Tensors:
        """expand(mask): parameter masks over ``extent`` (differentiable in ``mask``)."""
        return torch_param_masks(self.layout, split(self.layout, mask), dict(self.shapes), self.extent)

    def forward(
        self, model: nn.Module, train: Tensors, fixed: Tensors, x: torch.Tensor, mask: torch.Tensor, pm: Tensors | None = None
    ) -> torch.Tensor:
        """f(x; w * expand(mask)), or with the hidden activations masked (``impl``); ``train`` are the
        trainable weights, ``fixed`` the others (empty: the model's own). ``pm``: expand(mask), if known."""
        if self.impl == "activation":
            with input_masks(model, self.layout, split(self.layout, mask)):
                return functional_call(model, {**train, **fixed}, (x,))  # type: ignore[no-any-return]
        pm = self.param_masks(mask) if pm is None else pm
        return functional_call(model, {**{n: p * pm[n] if n in pm else p for n, p in train.items()}, **fixed}, (x,))  # type: ignore[no-any-return]


def ste_mask(scores: torch.Tensor, u: torch.Tensor, identity: bool = False) -> torch.Tensor:
    """Bernoulli(sigmoid(s)) from the uniforms ``u`` (1 where u < sigmoid(s), as ``train.bernoulli``)
    with a straight-through gradient (spec D5): forward value bern(theta); backward
    d/ds = dL/dm * sigmoid'(s), or dL/dm itself when ``identity``."""
    theta = torch.sigmoid(scores)
    through = scores if identity else theta
    return (u < theta.detach()).to(theta.dtype) + through - through.detach()


def diversity_term(scores: torch.Tensor, ref: torch.Tensor, weight: float) -> torch.Tensor:
    """-lambda * sum_h (sigmoid(s) - ref)^2 (Eq. 6): it enters the score loss with a minus
    sign, so a descent step pushes sigmoid(s) away from the other clients' masks."""
    return -weight * ((torch.sigmoid(scores) - ref) ** 2).sum()


def score_loss(
    scores: torch.Tensor,
    u: torch.Tensor,
    task: Callable[[torch.Tensor], torch.Tensor],
    ref: torch.Tensor | None,
    weight: float,
    identity: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Procedure I's loss in the scores: task(M(m~)) - lambda * div (``ref`` None: no diversity term),
    and the binary mask drawn for the step. ``task(mask)``: the minibatch loss under ``mask``."""
    m = ste_mask(scores, u, identity)
    loss = task(m)
    if ref is not None:
        loss = loss + diversity_term(scores, ref, weight)
    return loss, m.detach().round()


def weight_loss(task: torch.Tensor, mu: float, train: Tensors, anchor: Tensors, pm: Tensors) -> torch.Tensor:
    """Procedure II's loss in the weights: task + (mu/2) ||M' * (w - w_start)||^2 (``mu`` 0: task alone)."""
    if mu <= 0:
        return task
    return task + proximal_loss(mu, train, anchor, pm, task.dtype, task.device)
