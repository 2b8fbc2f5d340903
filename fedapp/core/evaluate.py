"""Model accuracy and loss on a split (global test set, or a client's local test)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from fedapp.core.train import loss_accumulator


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int = 1024,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``model`` in eval mode; (0, 0) on empty data.
    ``prepare`` turns a batch of stored samples (uint8 pixels) into model inputs, so a
    large test set is never held as float all at once. Batches go to the model's device
    (a no-op where the data already lives there); sums stay there until the one read at
    the end (float64 loss sum: the bits of a Python float sum over batches)."""
    if x.shape[0] == 0:
        return 0.0, 0.0
    model.eval()
    device = next(model.parameters()).device
    loss_sum = loss_accumulator(device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    for i in range(0, x.shape[0], batch_size):
        xb = x[i : i + batch_size].to(device, non_blocking=True)
        yb = y[i : i + batch_size].to(device, non_blocking=True)
        out = model(xb if prepare is None else prepare(xb))
        loss_sum += nn.functional.cross_entropy(out, yb, reduction="sum")
        correct += (out.argmax(1) == yb).sum()
    n = x.shape[0]
    return int(correct) / n, float(loss_sum) / n
