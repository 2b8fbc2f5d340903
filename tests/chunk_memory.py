"""What a batched chunk of k clients really allocates, against ``client-batch = auto``'s estimate
(used by tests/test_client_batch_memory.py and bench/client_batch_memory.py, which says more)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from fedapp.batched.fit import FitCall
from fedapp.client.cache import resolve_once
from fedapp.core.masks import neuron_layout
from fedapp.data import client_data, dataset_for
from fedapp.engine.batched_executor import kernel
from fedapp.engine.client_batch_size import chunk_bytes
from fedapp.methods.base import settings_of
from fedapp.methods.pews_kernel import WarmupCall
from fedapp.methods.pews_train import WarmupLoop
from fedapp.methods.proximal import proximal_mu
from fedapp.models import build_model
from fedapp.sim.run_local import full_config

BASE = {"dataset": "digits", "num-clients": 8, "energy-meter": "none", "device": "cpu", "local-epochs": 1}
CASES: dict[str, dict[str, Any]] = {
    "cnn": {"model": "cnn"},
    "mlp": {"model": "mlp"},
    "mlp-5-epochs": {"model": "mlp", "local-epochs": 5},
    "mlp-fedprox-adam": {"model": "mlp", "method": "fedprox", "proximal-mu": 0.1, "optimizer": "adam", "lr": 0.01},
    "fedselect-mlp": {"model": "mlp", "method": "fedselect"},
    "fedpews-mlp-warmup": {"model": "mlp", "method": "fedpews", "warmup-fraction": 0.5, "diversity-weight": 1.0},
}


def config(case: str) -> dict[str, Any]:
    return full_config({**BASE, **CASES[case]})


def lanes(raw: Mapping[str, Any], k: int, device: torch.device) -> tuple[list[FitCall | WarmupCall], list[Any]]:
    """k clients' parked calls, each with what its lane holds on ``device`` (its own copies), and
    what the lanes hold beside their calls."""
    cfg, method, params = resolve_once(raw)
    ds = dataset_for(cfg)
    settings = settings_of(cfg)
    calls: list[FitCall | WarmupCall] = []
    held: list[Any] = []  # FedSelect's shared-pass masks
    for pid in range(k):
        model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed).to(device)
        data = client_data(cfg, pid)
        x, y, *test = (torch.from_numpy(a).to(device, copy=True) for a in (data.x_train, data.y_train, data.x_test, data.y_test))
        held.append(test)
        gen = torch.Generator().manual_seed(pid)
        if cfg.method == "fedpews":
            layout = neuron_layout(model)
            mu = proximal_mu(cfg)
            loop = WarmupLoop(model, layout, settings, params.mask_impl, mu, params.mask_extent, params.ste)
            scores = torch.full((layout.total,), float(params.mask_init), device=device)
            ref = torch.full((layout.total,), 0.5, device=device) if params.diversity_weight > 0 else None
            pews = {"ref": ref, "weight": params.diversity_weight, "lr": params.mask_lr, "shared": params.mask_draw == "shared"}
            calls.append(WarmupCall(loop, x, y, scores, pews, gen))
            continue
        masks = None
        if cfg.method == "fedselect":  # LocalAlt's personal pass; the lane holds the shared pass's masks too
            masks = {n: (torch.rand(p.shape, generator=gen) < 0.5).to(device) for n, p in model.named_parameters()}
            held.append({n: ~m for n, m in masks.items()})
        prox = method.client(cfg, params).extra_loss(model)
        calls.append(FitCall(model, x, y, settings, gen, masks, prox, None))  # type: ignore[arg-type]
    return calls, held


def measure(raw: Mapping[str, Any], k: int, device: str = "cpu") -> int:
    """Peak bytes the allocator held for a chunk of k clients above its level before the first lane."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.ones(8, 8, device=dev) @ torch.ones(8, 8, device=dev)  # cuBLAS's workspace: the process's, not the chunk's
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        calls, held = lanes(raw, k, dev)
        outcomes = kernel(calls)
        torch.cuda.synchronize(dev)
        del calls, held, outcomes
        return int(torch.cuda.max_memory_allocated(dev)) - base
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        calls, held = lanes(raw, k, dev)
        outcomes = kernel(calls)
        del calls, held, outcomes
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    level = peak = 0
    for _, nbytes in events:
        level += nbytes
        peak = max(peak, level)
    return peak


def estimate(raw: Mapping[str, Any], k: int, device: str = "cpu") -> int:
    """``chunk_bytes`` for k clients with the sizes of partition 0 (the chunk ``lanes`` builds has
    the sizes of partitions 0..k-1; the estimate takes one client's, as ``auto`` takes twice a mean one's)."""
    cfg, method, params = resolve_once(raw)
    data = client_data(cfg, 0)
    memory = method.client(cfg, params).chunk_memory()
    return chunk_bytes(cfg, k, int(data.x_train.shape[0]), int(data.x_test.shape[0]), memory, cuda=torch.device(device).type == "cuda")
