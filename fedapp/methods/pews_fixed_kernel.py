"""FedPeWS-Fixed's warm-up round through the engine's park point, and its batched kernel.

One at a time, a warm-up round is ``local_train`` with the client's block as activation masks
(forward hooks, ``pews_steps.input_masks``) and as gradient masks. The kernel is the local
training kernel (``batched.train.train_clients``) with each client's neuron mask as a per-client
input of the forward pass: the hooks are registered inside the vmapped function, so each
client's mask stays its own. Nothing here is engine code: the call type, its kernel and the
``register`` line are all this file (docs/architecture.md, "Add a batched kernel").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call

from fedapp.batched import fit
from fedapp.batched.fit import FitCall
from fedapp.batched.seam import Kernel, register
from fedapp.batched.train import ClientOutcome, Forward, train_clients
from fedapp.core.masks import NeuronLayout
from fedapp.core.train import TrainStats
from fedapp.methods.pews_steps import Tensors, input_masks, split


@dataclass
class FixedWarmupCall:
    """One client's warm-up round: its ``local_train`` call and its block (flat float 0/1 over the hidden neurons)."""

    fit: FitCall
    layout: NeuronLayout
    neurons: torch.Tensor
    outcome: ClientOutcome | None = None

    @property
    def gen(self) -> torch.Generator:
        return self.fit.gen

    def run_here(self) -> TrainStats:
        with input_masks(self.fit.model, self.layout, split(self.layout, self.neurons)):
            return self.fit.run_here()


def masked_forward(layout: NeuronLayout) -> Forward:
    """One client's forward pass with its hidden activations masked by ``inputs["neurons"]``."""

    def forward(model: nn.Module, params: Tensors, buffers: Tensors, xb: torch.Tensor, inputs: Tensors) -> torch.Tensor:
        with input_masks(model, layout, split(layout, inputs["neurons"])):
            return functional_call(model, (params, buffers), (xb,))  # type: ignore[no-any-return]

    return forward


def why_not(call: FixedWarmupCall) -> str | None:
    return fit.why_not(call.fit)


def key(call: FixedWarmupCall) -> Hashable:
    return (fit.key(call.fit), call.layout)


def train(calls: Sequence[FixedWarmupCall]) -> list[ClientOutcome]:
    first = calls[0].fit
    works = [dataclasses.replace(fit.work(c.fit), inputs={"neurons": c.neurons}) for c in calls]
    mu = first.prox.mu if first.prox is not None else 0.0
    return train_clients(first.model, works, first.settings, first.x.device, len(calls), mu, masked_forward(calls[0].layout))


def finish(call: FixedWarmupCall, outcome: ClientOutcome) -> TrainStats:
    return fit.finish(call.fit, outcome)


register(FixedWarmupCall, Kernel("FedPeWS-Fixed warm-up chunk", why_not, key, train, finish))
