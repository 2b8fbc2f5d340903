"""A finished run's models back as torch modules, for analysis or a paper's own evaluation.

``load_model(run_dir)``: the model the run's config builds, with ``model.npz`` (the final global
weights, exactly those the last round evaluated) loaded into it. ``load_client_model(run_dir,
partition)``: the same model with that client's personal parts laid over it, from the client
state the run kept (``<run-dir>/client-state/<run token>/client-<p>.npz`` in simulation, or a
node's ``state-dir`` folder in deployment): every state record whose arrays are named, shaped and
typed like the model's own (FedSelect/FedPer/Local's whole model θ_k, FedSPU's personal model,
FedPart's BatchNorm statistics...). A method that keeps no such record raises, naming the
records it found: its clients use the global model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedapp.core.config import RunConfig

if TYPE_CHECKING:
    from torch import nn


def run_config(run_dir: str | Path) -> RunConfig:
    """The run's resolved config, as config.json recorded it."""
    from fedapp.methods.registry import resolve
    from fedapp.server.results import read_config

    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a fedapp run folder?")
    return resolve(read_config(run_dir))[0]


def load_model(run_dir: str | Path) -> nn.Module:
    """The run's model on the CPU, in eval mode, holding the final global weights (model.npz)."""
    import torch

    from fedapp.core.device import load_host_arrays
    from fedapp.core.safe_read import read_npz
    from fedapp.data import dataset_for
    from fedapp.models import build_model

    path = Path(run_dir) / "model.npz"
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{path} does not exist: the run in {run_dir} has not finished (checkpoint.npz holds its last round)")
    cfg = run_config(run_dir)
    ds = dataset_for(cfg)  # the input shape and class count the model was built for
    with torch.device("cpu"):
        model = build_model(cfg, ds.in_shape, ds.num_classes)
    load_host_arrays(model, read_npz(path, run_dir))  # a regular file inside the run folder, its members checked first
    return model.eval()


def client_records(run_dir: str | Path, partition: int, state_dir: str | Path | None = None) -> dict[str, dict[str, np.ndarray]]:
    """A client's state records (key -> arrays) from its current state file."""
    from fedapp.core.state import DiskStore
    from fedapp.server.checkpoint import client_state_dir

    folder = Path(state_dir) if state_dir is not None else client_state_dir(run_dir)
    store = DiskStore(folder)
    if not store.path(partition).exists():
        raise FileNotFoundError(f"{store.path(partition)} does not exist: no state kept for partition {partition} in {folder}")
    records: dict[str, dict[str, np.ndarray]] = {}
    for name, array in store.read(partition).items():
        key, array_name = name.split("/", 1)
        records.setdefault(key, {})[array_name] = array
    return records


def load_client_model(run_dir: str | Path, partition: int, state_dir: str | Path | None = None) -> nn.Module:
    """``load_model(run_dir)`` with client ``partition``'s personal parts laid over the global weights."""
    from fedapp.core.device import host_arrays, load_host_arrays

    model = load_model(run_dir)
    own = host_arrays(model.state_dict())
    records = client_records(run_dir, partition, state_dir)
    personal = {
        key: arrays
        for key, arrays in records.items()
        if arrays and all(n in own and a.shape == own[n].shape and a.dtype == own[n].dtype for n, a in arrays.items())
    }  # fmt: skip
    if not personal:
        raise ValueError(
            f"partition {partition}'s client state holds no model arrays (records: {', '.join(sorted(records)) or 'none'}): "
            f"method {run_config(run_dir).method!r} keeps no personal parameters; load_model gives the model its clients use"
        )
    for arrays in sorted(personal.values(), key=len, reverse=True):  # a whole model first, then partial records over it
        own.update(arrays)
    load_host_arrays(model, own)
    return model.eval()
