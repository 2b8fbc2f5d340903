"""What a client process keeps between messages, so a message costs only its own work.

A process (Ray actor, the in-process engine, a SuperNode's ClientApp process) resolves a
run-config once, keeps one model per (model, seed, device, thread) that each message resets
to w0 plus the received global values instead of rebuilding it, and decodes a dense global
record shared by several messages (the in-process engine sends every client the same
object) once. Results stay bit-identical to building everything afresh per message: the
reset restores the default generator to its state right after the seeded build.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord

from fedapp.core import wire
from fedapp.core.config import RunConfig
from fedapp.core.device import host_arrays
from fedapp.data import Dataset
from fedapp.methods.base import Method
from fedapp.methods.registry import resolve
from fedapp.models import initial_model

_lock = threading.Lock()
_configs: OrderedDict[tuple[Any, ...], tuple[RunConfig, Method, Any]] = OrderedDict()


def resolve_once(raw: Mapping[str, Any]) -> tuple[RunConfig, Method, Any]:
    """``resolve(raw)``, remembered per process for the few run-configs it serves."""
    key = tuple(sorted(raw.items()))
    with _lock:
        if key in _configs:
            _configs.move_to_end(key)
            return _configs[key]
    out = resolve(raw)  # a bad run-config raises here, every time
    with _lock:
        _configs[key] = out
        while len(_configs) > 8:
            _configs.popitem(last=False)
    return out


@dataclass
class ProcessModel:
    """The one model a process trains for a (model, seed, device): reset per message, never rebuilt."""

    model: torch.nn.Module
    initial: dict[str, np.ndarray]  # w0 on the host (read-only): entries the server does not send keep these
    everything: dict[str, np.ndarray]  # all-True masks shaped like each entry (read-only): what a dense message covers
    rng: torch.Tensor  # torch.default_generator's state right after the seeded build

    def reset(self) -> None:
        """Undo what the last message left behind that loading a state dict does not: the
        default generator as a fresh seeded build leaves it, trainability, gradients, mode."""
        torch.default_generator.set_state(self.rng)
        for p in self.model.parameters():
            p.requires_grad_(True)
            p.grad = None
        self.model.train()


_models: OrderedDict[tuple[Any, ...], ProcessModel] = OrderedDict()


def process_model(cfg: RunConfig, ds: Dataset, device: torch.device) -> ProcessModel:
    """This process's (and thread's) model for ``cfg`` on ``device``: built once on the CPU
    from the seeded generator (the same w0 everywhere), then moved; reset on every use."""
    key = (cfg.model, cfg.mlp_hidden, ds.in_shape, ds.num_classes, cfg.seed, str(device), threading.get_ident())
    with _lock:
        pm = _models.get(key)
        if pm is not None:
            _models.move_to_end(key)
    if pm is None:
        model = initial_model(cfg, ds)
        rng = torch.default_generator.get_state()
        initial = {k: readonly(v) for k, v in host_arrays(model.state_dict()).items()}
        everything = {k: readonly(np.ones(v.shape, bool)) for k, v in initial.items()}
        pm = ProcessModel(model.to(device), initial, everything, rng)
        with _lock:
            _models[key] = pm
            mine = [k for k in _models if k[-1] == key[-1]]
            for old in mine[: max(len(mine) - 2, 0)]:  # two per thread (the engine's batched lanes are threads)
                del _models[old]
    pm.reset()
    return pm


def drop_thread_models() -> None:
    """Forget the models of the calling thread (a batched-executor lane that stops)."""
    me = threading.get_ident()
    with _lock:
        for key in [k for k in _models if k[-1] == me]:
            del _models[key]


def clear_caches() -> None:
    """Forget this process's run-configs, models and last global record (tests, benchmarks)."""
    with _lock:
        _configs.clear()
        _models.clear()
        _last_global.clear()


def readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


_last_global: list[tuple[ArrayRecord, dict[str, np.ndarray]]] = []


def global_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The arrays of a dense global record, decoded once for all the messages that share it
    (the in-process engine sends every client the same record object)."""
    with _lock:
        if _last_global and _last_global[0][0] is record:
            return _last_global[0][1]
    arrays = wire.read_arrays(record)
    with _lock:
        _last_global[:] = [(record, arrays)]
    return arrays
