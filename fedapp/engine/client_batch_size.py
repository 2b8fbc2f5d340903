"""``client-batch = auto``: how many clients the batched executor stacks in one chunk.

On CUDA the most clients whose stacked training fits in ``AUTO_MEMORY_SHARE`` of the device's
free memory (estimated per client by :func:`client_bytes`), at most ``AUTO_MAX``; elsewhere
``CPU_DEFAULT`` for models without convolutions and 1 with them (on a CPU vmapped
convolutions are slower than one client's at a time), and there only for rounds of at least
``CPU_MIN_CLIENTS`` clients (on a CPU 2 stacked MLP clients are slower than 2 one after the
other, 8 and more faster; docs/batched.md has the numbers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from fedapp.train import TrainSettings, needs_restore

CPU_DEFAULT = 8
CPU_MIN_CLIENTS = 8
AUTO_MAX = 256
AUTO_MEMORY_SHARE = 0.5


def auto_client_batch(raw: Mapping[str, Any]) -> tuple[int, int]:
    """(clients per chunk, fewest train messages of a round that is batched) for ``raw``."""
    from fedapp.client_cache import resolve_once
    from fedapp.data import dataset_for
    from fedapp.device import process_device
    from fedapp.models import build_model

    cfg = resolve_once(raw)[0]
    device = process_device(cfg.device)
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes)
    if device.type != "cuda":
        return (1 if any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules()) else CPU_DEFAULT), CPU_MIN_CLIENTS
    free, _ = torch.cuda.mem_get_info(device)
    n_max = max(2 * int(ds.y_train.shape[0]) // max(cfg.num_clients, 1), cfg.batch_size)  # twice a mean client's samples
    per_client = client_bytes(model, ds.in_shape, cfg.batch_size, n_max, optimizer_slots(cfg), cfg.uses_prox)
    return max(1, min(AUTO_MAX, math.floor(AUTO_MEMORY_SHARE * free / per_client))), 1


def optimizer_slots(cfg: Any) -> int:
    settings = TrainSettings(1, 0, cfg.batch_size, cfg.lr, cfg.optimizer, cfg.momentum, cfg.weight_decay)
    return 2 if settings.optimizer == "adam" else int(settings.momentum > 0) + int(needs_restore(settings))


def client_bytes(model: nn.Module, in_shape: tuple[int, ...], batch_size: int, samples: int, slots: int, prox: bool) -> int:
    """Device bytes one client adds to a chunk: weights, gradients, the step's write-back copy,
    optimizer state and the proximal anchor; twice the outputs of every module on one
    minibatch (kept for the backward pass, and their gradients); its training samples."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    outputs = 0

    def count(_m: nn.Module, _i: Any, out: Any) -> None:
        nonlocal outputs
        if isinstance(out, torch.Tensor):
            outputs += out.numel() * out.element_size()

    handles = [m.register_forward_hook(count) for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model(torch.zeros((batch_size, *in_shape)))
    finally:
        for h in handles:
            h.remove()
    data = samples * (math.prod(in_shape) * 4 + 8)
    return params * (3 + slots + int(prox)) + buffers + 2 * outputs + data
