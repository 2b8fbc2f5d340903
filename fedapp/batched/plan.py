"""Minibatch plans of a batch of clients, laid out as one (steps, clients, rows) index grid.

Each client's minibatches are drawn with ``fedapp.core.train.batches`` from its own generator,
so they are the ones ``local_train`` would draw. Clients differ in data size, so in the
grid a short minibatch is padded with weight-0 rows and a client with fewer steps gets
no-op steps at the end (``active`` False), whose updates the trainer discards. Models
whose forward pass couples the rows of a minibatch (BatchNorm in train mode) cannot take
padded rows: ``chunks(..., exact_sizes=True)`` puts only clients with the same sequence
of minibatch sizes together, so their grid has no padding at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from fedapp.core.train import TrainSettings, batches


def client_batches(n: int, settings: TrainSettings, gen: torch.Generator) -> list[torch.Tensor]:
    """One client's minibatch index lists, exactly as ``local_train`` draws them."""
    if n <= 0:
        raise ValueError("a client in a batched run has no training samples")
    return batches(n, settings, gen)


def sizes_of(plan: Sequence[torch.Tensor]) -> tuple[int, ...]:
    return tuple(int(b.numel()) for b in plan)


def chunks(plans: Sequence[Sequence[torch.Tensor]], client_batch: int, exact_sizes: bool) -> list[list[int]]:
    """Client indices per vectorised chunk, at most ``client_batch`` each.

    Clients are taken longest plan first (as FedJAX's blocks), so a chunk pads few no-op
    steps; with ``exact_sizes`` only clients whose minibatch sizes are the same step for
    step share a chunk."""
    if client_batch < 1:
        raise ValueError(f"client batch must be at least 1, got {client_batch}")
    order = sorted(range(len(plans)), key=lambda i: -len(plans[i]))
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in order:
        groups.setdefault(sizes_of(plans[i]) if exact_sizes else (), []).append(i)
    return [g[k : k + client_batch] for g in groups.values() for k in range(0, len(g), client_batch)]


@dataclass(frozen=True)
class StepGrid:
    """Row indices into the clients' concatenated data, per step and client. Step t uses
    the first ``widths[t]`` columns (its largest minibatch)."""

    rows: torch.Tensor  # (T, B, W) int64: global row of each minibatch entry (padding: the client's first row)
    weights: torch.Tensor  # (T, B, W) float: 1 for a real row, 0 for padding (all 1 on a no-op step)
    active: torch.Tensor  # (T, B) bool: whether the step is one of the client's own
    all_active: list[bool]  # per step, on the host: no client idles (nothing to discard)
    widths: list[int]  # per step, on the host
    steps: list[int]  # per client
    padded: bool  # some minibatch has weight-0 rows

    @property
    def num_steps(self) -> int:
        return len(self.all_active)


def step_grid(plans: Sequence[Sequence[torch.Tensor]], sizes: Sequence[int], dtype: torch.dtype, device: torch.device) -> StepGrid:
    """Lay out ``plans`` (client-local indices) for clients with ``sizes`` rows each,
    whose data is concatenated in this order."""
    steps = [len(p) for p in plans]
    t_max, width = max(steps), max(int(b.numel()) for p in plans for b in p)
    local = torch.full((t_max, len(plans), width), -1, dtype=torch.int64)
    for i, plan in enumerate(plans):
        padded = pad_sequence(list(plan), batch_first=True, padding_value=-1)
        local[: len(plan), i, : padded.shape[1]] = padded
    offsets = torch.tensor([0, *sizes[:-1]], dtype=torch.int64).cumsum(0).view(1, -1, 1)
    valid = local >= 0
    active = torch.arange(t_max).view(-1, 1) < torch.tensor(steps).view(1, -1)
    rows = torch.where(valid, local + offsets, offsets)
    weights = (valid | ~active.unsqueeze(-1)).to(dtype)
    counts = valid.sum(dim=2)  # (T, B) real rows
    widths = counts.max(dim=1).values
    short = bool(((counts < widths.view(-1, 1)) & active).any())
    return StepGrid(
        rows.to(device),
        weights.to(device),
        active.to(device),
        [bool(a) for a in active.all(dim=1)],
        [int(w) for w in widths],
        steps,
        padded=short,
    )
