"""Local training (``train.local_train``) through the engine's park point, and its batched kernel.

``local_fit`` takes ``local_train``'s arguments; client policies call it (``ClientPolicy.fit``,
FedSelect's LocalAlt) so that the in-process engine can train many clients' calls together
(``fedapp.batched.seam``); anywhere else it is ``local_train``. ``FIT`` is the kernel the engine
uses for a ``FitCall``: ``train_clients`` (``train.py``) over calls of one key.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedapp.batched.seam import Kernel, park, register
from fedapp.batched.train import ClientOutcome, ClientWork, train_clients, unbatchable
from fedapp.core.train import Augment, ExtraLoss, ProximalTerm, TrainSettings, TrainStats, local_train


@dataclass
class FitCall:
    """One client's ``local_train`` call, and where its outcome goes."""

    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    settings: TrainSettings
    gen: torch.Generator
    grad_masks: dict[str, torch.Tensor] | None
    extra_loss: ExtraLoss | None
    augment: Augment | None
    outcome: ClientOutcome | None = None  # None after the kernel ran: it raised, train with local_train

    @property
    def prox(self) -> ProximalTerm | None:
        return self.extra_loss if isinstance(self.extra_loss, ProximalTerm) else None

    def run_here(self) -> TrainStats:
        return local_train(self.model, self.x, self.y, self.settings, self.gen, self.grad_masks, self.extra_loss, self.augment)


def local_fit(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainSettings,
    gen: torch.Generator,
    grad_masks: dict[str, torch.Tensor] | None = None,
    extra_loss: ExtraLoss | None = None,
    augment: Augment | None = None,
) -> TrainStats:
    """``local_train``, or inside the batched executor the same training done with other clients."""
    stats: TrainStats = park(FitCall(model, x, y, settings, gen, grad_masks, extra_loss, augment))
    return stats


def why_not(call: FitCall) -> str | None:
    """Why a ``local_train`` call runs one at a time (None: the kernel reproduces it)."""
    model, extra_loss = call.model, call.extra_loss
    reason = unbatchable(model)
    if reason is not None:
        return f"model: {reason}"
    hooked = [n for n, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks]
    if hooked:  # the kernel runs one template model for the whole chunk: its hooks would apply to every client
        return f"forward hooks on {', '.join(hooked)}"
    if extra_loss is not None and not isinstance(extra_loss, ProximalTerm):
        return "an extra loss other than FedProx's proximal term"
    if isinstance(extra_loss, ProximalTerm) and not all(
        torch.equal(extra_loss.anchor[n], p) for n, p in model.named_parameters() if p.requires_grad and n in extra_loss.anchor
    ):  # the kernel anchors the proximal term at each client's start weights
        return "a proximal term anchored elsewhere than the start weights"
    if call.settings.optimizer not in ("sgd", "adam"):
        return f"optimizer {call.settings.optimizer!r}"
    if call.x.shape[0] == 0:
        return "a client without training samples"
    return None


def key(call: FitCall) -> Hashable:
    """What clients of one vectorised chunk must share."""
    model, x = call.model, call.x
    state = tuple((k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items())
    trainable = tuple(n for n, p in model.named_parameters() if p.requires_grad)
    mu = call.prox.mu if call.prox is not None else 0.0
    return (type(model), state, trainable, call.settings, mu, str(x.device), tuple(x.shape[1:]), x.dtype)


def work(call: FitCall) -> ClientWork:
    """The call as ``train_clients`` takes it: its data, generator, start state and masks."""
    state = {k: v.detach() for k, v in call.model.state_dict().items()}
    prox_masks = call.prox.masks if call.prox is not None else None
    return ClientWork(call.x, call.y, call.gen, state, call.grad_masks, prox_masks, call.augment)


def train(calls: Sequence[FitCall]) -> list[ClientOutcome]:
    """``train_clients`` over calls of one key, as one chunk."""
    first = calls[0]
    mu = first.prox.mu if first.prox is not None else 0.0
    return list(train_clients(first.model, [work(c) for c in calls], first.settings, first.x.device, len(calls), mu))


def finish(call: FitCall, outcome: ClientOutcome) -> TrainStats:
    """The trained parameters and buffers into the client's own model, as ``local_train`` leaves it."""
    write_state(call.model, outcome.state)
    return outcome.stats


def write_state(model: nn.Module, state: dict[str, Any]) -> None:
    with torch.no_grad():
        for k, v in model.state_dict().items():
            v.copy_(state[k])
    model.train()


FIT = Kernel("chunk", why_not, key, train, finish)
register(FitCall, FIT)
