"""The one torch device a process trains and evaluates on, chosen once and handed down.

Run-config ``device``: ``auto`` (CUDA if torch sees one, else MPS, else CPU), ``cpu``,
``cuda`` (the current CUDA device), ``cuda:N`` or ``mps``. A SuperNode's own node-config
``device`` wins over the run-config (each board knows its hardware); the server uses the
run-config's. A value the machine cannot honour stops the run with a one-line
ConfigError naming the key, before any training. Under Ray (`flwr run` with
``client-resources-num-gpus`` > 0) each ClientApp actor sees only the GPU Ray gave it
(Ray sets CUDA_VISIBLE_DEVICES per actor), so ``auto`` and ``cuda`` mean that GPU.

Only this module decides; the client (ClientJob.device) and the server's central
evaluation receive the result, and nothing in methods/ or the core picks a device.
``host_arrays`` / ``load_host_arrays`` move a whole state dict across the host boundary
(wire, state store) in one transfer per dtype rather than one blocking copy per tensor.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedapp.core.config import ConfigError, RunConfig, device_check

log = logging.getLogger("flwr")

_lock = threading.Lock()
_chosen: dict[str, torch.device] = {}


def pick(value: str, origin: str = "run-config") -> torch.device:
    """The device ``value`` names on this machine, or a ConfigError naming ``origin``'s key."""
    allowed = device_check(value)
    if allowed is not None:
        raise ConfigError(f"{origin} key 'device' = {value!r} is not allowed: expected {allowed}")
    if value == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("mps") if torch.backends.mps.is_available() else torch.device("cpu")
    if value.startswith("cuda"):
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise ConfigError(
                f"{origin} key 'device' = {value!r} is not allowed: torch {torch.__version__} ({build}) sees no CUDA device here"
            )
        count = torch.cuda.device_count()
        index = int(value.split(":", 1)[1]) if ":" in value else torch.cuda.current_device()
        if index >= count:
            raise ConfigError(
                f"{origin} key 'device' = {value!r} is not allowed: this process sees {count} CUDA device(s), cuda:0..cuda:{count - 1}"
                " (under Ray a ClientApp sees only the GPU it was given)"
            )
        return torch.device("cuda", index)
    if value == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{origin} key 'device' = {value!r} is not allowed: torch sees no Apple MPS device here")
    return torch.device(value)


def describe(device: torch.device) -> str:
    """``cuda:0 (NVIDIA H100 80GB HBM3)``, ``mps`` or ``cpu``: what a log line and devices.json say."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def process_device(value: str, origin: str = "run-config") -> torch.device:
    """This process's device for ``value``: checked and logged once, then reused."""
    with _lock:
        if value not in _chosen:
            device = pick(value, origin)
            log.info("device=%s (%s): training on %s", value, origin, describe(device))
            _chosen[value] = device
        return _chosen[value]


def node_device(cfg: RunConfig, node_config: Mapping[str, Any]) -> torch.device:
    """A client's device: the node-config's ``device`` where the node sets one, else the run-config's."""
    own = node_config.get("device")
    if own:
        return process_device(str(own), "node-config")
    return process_device(cfg.device)


def host_arrays(tensors: Mapping[str, torch.Tensor], batched: bool | None = None) -> dict[str, np.ndarray]:
    """Fresh host copies of ``tensors`` (a state dict at the message or state-store boundary).
    Off the CPU (``batched`` None), one transfer per dtype instead of one blocking copy per tensor."""
    if batched is None:
        batched = any(t.device.type != "cpu" for t in tensors.values())
    if not batched:
        return {k: t.detach().numpy().copy() for k, t in tensors.items()}
    out: dict[str, np.ndarray] = {}
    for dtype in dict.fromkeys(t.dtype for t in tensors.values()):
        names = [k for k, t in tensors.items() if t.dtype == dtype]
        flat = torch.cat([tensors[k].detach().reshape(-1) for k in names]).cpu().numpy()
        for k, piece in zip(names, np.split(flat, np.cumsum([tensors[k].numel() for k in names])[:-1]), strict=True):
            out[k] = piece.reshape(tuple(tensors[k].shape))
    return {k: out[k] for k in tensors}


def load_host_arrays(model: torch.nn.Module, arrays: Mapping[str, np.ndarray], strict: bool = True, batched: bool | None = None) -> None:
    """``model.load_state_dict`` from host arrays; off the CPU (``batched`` None), one transfer per dtype."""
    device = next(model.parameters()).device
    if not (device.type != "cpu" if batched is None else batched):
        model.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()}, strict=strict)
        return
    on_device: dict[str, torch.Tensor] = {}
    for dtype in dict.fromkeys(np.asarray(v).dtype for v in arrays.values()):
        names = [k for k, v in arrays.items() if np.asarray(v).dtype == dtype]
        flat = torch.from_numpy(np.concatenate([np.asarray(arrays[k]).reshape(-1) for k in names])).to(device)
        for k, piece in zip(names, flat.split([int(np.asarray(arrays[k]).size) for k in names]), strict=True):
            on_device[k] = piece.view(np.asarray(arrays[k]).shape)
    model.load_state_dict(on_device, strict=strict)
