"""The one local training loop: gradient mask, optional extra loss, SGD or Adam.

``grad_masks[name]`` (bool tensor shaped like the parameter) says which entries may
change. Gradients are masked (so momentum buffers see no frozen gradient) and, when
the optimizer has state or weight decay, frozen entries are restored after each step,
so a masked-out weight gets exactly zero update under any optimizer. Parameters with
``requires_grad=False`` are left out of the optimizer (autograd does less work).
``augment`` (the dataset's training augmentation) transforms each minibatch, drawing
its randomness from the same seeded generator as the shuffling.

Device: the loop runs where the model and data already are. Random draws come from the
job's CPU generator (so a GPU run shuffles and samples exactly as a CPU run) and reach
the device as one asynchronous copy; the loss is summed on the device in float64 (the
same additions, in the same order, as a Python float sum) and read once at the end, so
no step waits for the host.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from fedapp.core.partial_backward import partial_backward

ExtraLoss = Callable[[nn.Module], torch.Tensor]
Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]  # minibatch -> augmented minibatch


@dataclass(frozen=True)
class TrainSettings:
    epochs: int
    steps: int  # > 0: this many minibatch steps instead of epochs
    batch_size: int
    lr: float
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    partial_backward: bool = False  # structured masks: skip frozen weight gradients (core/partial_backward.py)


@dataclass
class TrainStats:
    loss: float  # mean minibatch loss over the whole local run
    num_examples: int
    steps: int
    seconds: float


def batches(n: int, settings: TrainSettings, gen: torch.Generator) -> list[torch.Tensor]:
    """Minibatch index lists (on the generator's device): shuffled epochs, or exactly ``steps`` batches."""
    out: list[torch.Tensor] = []
    if settings.steps > 0:
        while len(out) < settings.steps:
            out.extend(torch.randperm(n, generator=gen, device=gen.device).split(settings.batch_size))
        return out[: settings.steps]
    for _ in range(settings.epochs):
        out.extend(torch.randperm(n, generator=gen, device=gen.device).split(settings.batch_size))
    return out


def batches_on(device: torch.device, n: int, settings: TrainSettings, gen: torch.Generator) -> list[torch.Tensor]:
    """:func:`batches`, moved to ``device`` in one copy (CPU: the same tensors)."""
    out = batches(n, settings, gen)
    if device == gen.device or not out:
        return out
    return list(torch.cat(out).to(device, non_blocking=True).split([len(b) for b in out]))


def uniform(shape: torch.Size | tuple[int, ...], gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """U[0, 1) float32 draws from ``gen`` (a CPU generator), placed on ``device`` without a host sync."""
    return torch.rand(shape, generator=gen, device=gen.device).to(device, non_blocking=True)


def bernoulli(p: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Bernoulli(p) on p's device from the CPU generator ``gen``: on the CPU bit for bit
    ``torch.bernoulli(p, generator=gen)`` (the same uniform draws compared with p)."""
    return (uniform(p.shape, gen, p.device) < p).to(p.dtype)


def loss_accumulator(device: torch.device) -> torch.Tensor:
    """A zero on ``device`` to sum minibatch losses into: float64, so adding float32 losses
    in order gives the bits of Python's ``total += float(loss)`` (MPS has no float64)."""
    return torch.zeros((), dtype=torch.float32 if device.type == "mps" else torch.float64, device=device)


def make_optimizer(params: list[nn.Parameter], s: TrainSettings) -> torch.optim.Optimizer:
    if s.optimizer == "adam":
        return torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay)
    return torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)


@dataclass(frozen=True)
class ProximalTerm:
    """(mu/2) * ||M * (x - x_start)||^2 over trainable parameters (FedProx), as a callable
    extra loss whose parts a batched trainer can read (``fedapp.batched.fit``)."""

    mu: float
    anchor: dict[str, torch.Tensor]
    masks: dict[str, torch.Tensor] | None = None

    def __call__(self, model: nn.Module) -> torch.Tensor:
        device = next(iter(self.anchor.values())).device if self.anchor else torch.device("cpu")
        params = {n: p for n, p in model.named_parameters() if p.requires_grad and n in self.anchor}
        return proximal_loss(self.mu, params, self.anchor, self.masks or {}, torch.get_default_dtype(), device)


def proximal_loss(
    mu: float, params: Mapping[str, torch.Tensor], anchor: Mapping[str, torch.Tensor], pmasks: Mapping[str, torch.Tensor],
    dtype: torch.dtype, device: torch.device,
) -> torch.Tensor:  # fmt: skip
    """(mu/2) * ||M * (p - anchor)||^2: FedProx's term, as the one-client loop (``ProximalTerm``)
    and the batched kernels (``batched/train.py``, FedPeWS's weight loss) all add it."""
    return 0.5 * mu * masked_distance(params, anchor, pmasks, dtype, device)


def masked_distance(
    params: Mapping[str, torch.Tensor],
    anchor: Mapping[str, torch.Tensor],
    pmasks: Mapping[str, torch.Tensor],
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """sum ||(p - anchor) * mask||^2 over ``params`` (mask only where ``pmasks`` has one), summed
    from a ``dtype`` zero on ``device`` in the order of ``params``: the FedProx distance of the
    one-client loop (ProximalTerm) and of the batched kernels alike."""
    total = torch.zeros((), dtype=dtype, device=device)
    for n, p in params.items():
        d = p - anchor[n]
        if n in pmasks:
            d = d * pmasks[n]
        total = total + (d * d).sum()
    return total


def proximal_term(mu: float, anchor: dict[str, torch.Tensor], masks: dict[str, torch.Tensor] | None = None) -> ExtraLoss:
    """(mu/2) * ||M * (x - x_start)||^2 over trainable parameters (FedProx)."""
    return ProximalTerm(mu, anchor, masks)


def needs_restore(settings: TrainSettings) -> bool:
    """Whether masked gradients alone can still move frozen entries (optimizer state or decay)."""
    return settings.optimizer != "sgd" or settings.momentum > 0 or settings.weight_decay > 0


def masked_step(opt: torch.optim.Optimizer, named: list[tuple[str, nn.Parameter]], masks: dict[str, torch.Tensor], restore: bool) -> None:
    """One optimizer step after ``backward`` in which entries where ``masks`` is 0 get exactly
    zero update: gradients are masked and, when ``restore``, frozen entries are written back
    (momentum or weight decay would otherwise move them). ``masks`` are float 0/1 tensors."""
    for n, p in named:
        if n in masks and p.grad is not None:
            p.grad.mul_(masks[n])
    frozen = {n: p.detach().clone() for n, p in named if n in masks} if restore else {}
    opt.step()
    if restore:
        with torch.no_grad():
            for n, p in named:
                if n in frozen:
                    p.copy_(torch.where(masks[n].bool(), p, frozen[n]))


def local_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: TrainSettings,
    gen: torch.Generator,
    grad_masks: dict[str, torch.Tensor] | None = None,
    extra_loss: ExtraLoss | None = None,
    augment: Augment | None = None,
) -> TrainStats:
    start = time.perf_counter()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    masks = {n: m.to(device=p.device, dtype=p.dtype) for n, p in named if grad_masks and (m := grad_masks.get(n)) is not None}
    opt = make_optimizer([p for _, p in named], settings)
    restore = bool(masks) and needs_restore(settings)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    total, steps = loss_accumulator(x.device), 0
    with partial_backward(model, masks) if settings.partial_backward else contextlib.nullcontext():
        for idx in batches_on(x.device, x.shape[0], settings, gen):
            opt.zero_grad(set_to_none=True)
            xb = x[idx] if augment is None else augment(x[idx], gen)
            loss = loss_fn(model(xb), y[idx])
            total += loss.detach()
            if extra_loss is not None:
                loss = loss + extra_loss(model)
            loss.backward()
            masked_step(opt, named, masks, restore)
            steps += 1
    return TrainStats(float(total) / max(steps, 1), int(x.shape[0]), steps, time.perf_counter() - start)
