"""What a chunk's step loop would otherwise draw or copy on the host, made before the loop.

Each client's augmentation draws (``fedapp.data.augment.Pipeline.draw``) and FedPeWS
warm-up uniforms come from its own CPU generator, step by step and client by client as the
per-step code drew them, so every generator gives the same values in the same order (the
results are the same bits). They are stacked as (steps, clients, ...) tensors and moved to
the device in one copy each (pinned and non-blocking on CUDA); the loop only slices them,
and augments the whole chunk's minibatch with batched tensor ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fedapp.data.augment import Pipeline


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` (host) on ``device`` in one copy that does not wait for the device (CUDA: pinned)."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def check_augments(augments: Sequence[Any]) -> None:
    """Refuse an augmentation the kernel cannot draw up front (any but a ``Pipeline``)."""
    for a in augments:
        if a is not None and not isinstance(a, Pipeline):
            raise ValueError(f"augmentation {a!r} is not a fedapp.data.augment.Pipeline: the batched kernel draws augmentation up front")


@dataclass
class ChunkAugment:
    """A chunk's augmentation draws on the device: per distinct pipeline, which clients use
    it, each draw slot as (steps, clients, width) and each op's fill per client (clients, C)."""

    pipes: list[Pipeline]
    uses: list[torch.Tensor]  # per pipe (B,) bool
    drawn: list[list[torch.Tensor]]  # per pipe, per draw slot (T, B, W)
    fills: list[list[torch.Tensor | None]]  # per pipe, per op (B, C) or None
    real: torch.Tensor  # (T, B, W) bool: a real row of an active client (the rest is zero, weight 0)

    def apply(self, t: int, raw: torch.Tensor) -> torch.Tensor:
        """Step ``t``'s minibatch (B, width, C, H, W), each client's real rows augmented with its
        own draws (clients without augmentation keep theirs), padding and idle rows zero."""
        b, width = raw.shape[:2]
        flat = raw.flatten(0, 1)
        out = raw
        for pipe, uses, drawn, fills in zip(self.pipes, self.uses, self.drawn, self.fills, strict=True):
            per_image = [None if f is None else f[:, None].expand(b, width, f.shape[1]).flatten(0, 1) for f in fills]
            aug = pipe.apply(flat, [d[t, :, :width].flatten() for d in drawn], per_image).view_as(raw)
            out = torch.where(uses.view(-1, *([1] * (raw.dim() - 1))), aug, out)
        return torch.where(self.real[t, :, :width].view(b, width, *([1] * (raw.dim() - 2))), out, torch.zeros_like(out))


def augment_draws(
    augments: Sequence[Any], gens: Sequence[torch.Generator], plans: Sequence[Sequence[torch.Tensor]], device: torch.device
) -> ChunkAugment:
    """Every step's augmentation draws of every client (step outer, client inner, as the step
    loop drew them), stacked and on ``device``; ``augments``: a ``Pipeline`` or None per client."""
    check_augments(augments)
    steps, width = max(len(p) for p in plans), max(int(b.numel()) for p in plans for b in p)
    pipes: list[Pipeline] = []
    index: list[int | None] = []
    for a in augments:
        if a is None:
            index.append(None)
            continue
        same = [k for k, p in enumerate(pipes) if p.structure() == a.structure()]
        if not same:
            pipes.append(a)
        index.append(same[0] if same else len(pipes) - 1)
    real = torch.zeros((steps, len(plans), width), dtype=torch.bool)
    slots: list[list[torch.Tensor]] = [[] for _ in pipes]
    for t in range(steps):
        for i, (a, k, gen, plan) in enumerate(zip(augments, index, gens, plans, strict=True)):
            if t >= len(plan):
                continue
            n = int(plan[t].numel())
            real[t, i, :n] = True
            if a is None or k is None:
                continue
            for s, d in enumerate(a.draw(n, gen)):
                if s == len(slots[k]):
                    slots[k].append(torch.zeros((steps, len(plans), width), dtype=d.dtype))
                slots[k][s][t, i, :n] = d
    fills: list[list[torch.Tensor | None]] = []
    for k, pipe in enumerate(pipes):
        per_op: list[torch.Tensor | None] = []
        for o, own in enumerate(pipe.fills()):
            if own is None:
                per_op.append(None)
                continue
            rows = [a.fills()[o] if a is not None and j == k else None for a, j in zip(augments, index, strict=True)]
            per_op.append(torch.stack([torch.zeros_like(own) if f is None else f for f in rows]).to(device))
        fills.append(per_op)
    uses = [to_device(torch.tensor([j == k for j in index]), device) for k in range(len(pipes))]
    return ChunkAugment(pipes, uses, [[to_device(s, device) for s in sl] for sl in slots], fills, to_device(real, device))


def warmup_draws(
    gens: Sequence[torch.Generator], plans: Sequence[Sequence[torch.Tensor]], shape: tuple[int, ...], shared: bool, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every step's FedPeWS uniforms (steps, clients, *shape) on ``device``: per step and client the
    score draw, then the weight draw unless ``shared`` (``train.bernoulli``'s draws); idle
    clients draw nothing (zeros)."""
    steps = max(len(p) for p in plans)
    u1 = torch.zeros((steps, len(plans), *shape), dtype=torch.float32)
    u2 = torch.zeros((steps, len(plans), *shape), dtype=torch.float32)
    for t in range(steps):
        for i, (gen, plan) in enumerate(zip(gens, plans, strict=True)):
            if t < len(plan):
                u1[t, i] = torch.rand(shape, generator=gen, device=gen.device)
                if not shared:
                    u2[t, i] = torch.rand(shape, generator=gen, device=gen.device)
    return to_device(u1, device), to_device(u2, device)
