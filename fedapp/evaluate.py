"""Model accuracy and loss on a split (global test set, or a client's local test)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


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
    large test set is never held as float all at once."""
    if x.shape[0] == 0:
        return 0.0, 0.0
    model.eval()
    correct, loss_sum = 0, 0.0
    for i in range(0, x.shape[0], batch_size):
        xb = x[i : i + batch_size]
        out = model(xb if prepare is None else prepare(xb))
        loss_sum += float(nn.functional.cross_entropy(out, y[i : i + batch_size], reduction="sum"))
        correct += int((out.argmax(1) == y[i : i + batch_size]).sum())
    n = x.shape[0]
    return correct / n, loss_sum / n
