"""A client's splits as tensors on its training device, kept per process.

``client_data`` slices and normalises a client's samples on the host each time it is
called. A process that serves the same client again (the in-process engine, a Ray actor)
takes the tensors from here instead, already on the device: one host-to-device copy the
first time, none in later rounds. The cache is a least-recently-used map bounded in bytes
(``CACHE_BYTES``), so a process simulating many clients holds at most that much and memory
does not grow from round to round.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

from fedapp.core.config import RunConfig
from fedapp.core.train import Augment
from fedapp.data import client_data, dataset_for
from fedapp.data.preprocess import augmentation

CACHE_BYTES = 1 << 30  # per process and device kind; a Jetson shares this with the GPU

# the run-config keys a client's data depends on (fedapp.data.client_data)
DATA_KEYS = (
    "dataset", "data_seed", "data_root", "normalize", "input_noise", "augment", "partition", "dirichlet_alpha",
    "classes_per_client", "min_partition_size", "num_clients", "local_test_fraction", "samples_per_client", "local_test_source",
)  # fmt: skip


@dataclass(frozen=True)
class ClientTensors:
    """One client's local train and test splits on its device, and its augmentation."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    augment: Augment | None = None

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.x_train, self.y_train, self.x_test, self.y_test))


_lock = threading.Lock()
_cache: OrderedDict[tuple[Any, ...], ClientTensors] = OrderedDict()


def client_tensors(cfg: RunConfig, pid: int, device: torch.device) -> ClientTensors:
    """``client_data(cfg, pid)`` on ``device``, from the cache where this process has it."""
    key = (*(getattr(cfg, k) for k in DATA_KEYS), pid, str(device))
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    data = client_data(cfg, pid)
    ds = dataset_for(cfg)
    x_train, y_train, x_test, y_test = (torch.from_numpy(a).to(device) for a in (data.x_train, data.y_train, data.x_test, data.y_test))
    augment = data.augment if device.type == "cpu" else augmentation(cfg.augment, ds, ds.norm, device)
    out = ClientTensors(x_train, y_train, x_test, y_test, augment)
    with _lock:
        if out.nbytes <= CACHE_BYTES:
            _cache[key] = out
            while sum(v.nbytes for v in _cache.values()) > CACHE_BYTES:
                _cache.popitem(last=False)
    return out


def clear() -> None:
    """Drop every cached client (tests, benchmarks)."""
    with _lock:
        _cache.clear()
