"""Physically smaller sub-models: cut kept neurons out of a feed-forward model and
write the trained values back.

Dropout-style methods (FjORD, random federated dropout) train a sub-network whose
dropped neurons are *absent*. Zeroing them in the full model gives the same maths
but the full compute; cutting them out makes local training cost shrink with the
kept fraction. The sub-model keeps the module names of the full one, so its
state-dict keys match and ``full[key][mask] <-> sub[key]`` (C order; the masks are
the outer-product masks of :func:`fedapp.core.masks.model_param_masks`).

Frozen-neuron methods (FedSPU) cannot use this: frozen neurons take part in the
forward pass with their personal values.
"""

from __future__ import annotations

import copy
import itertools

import numpy as np
import torch
from torch import nn

from fedapp.core.masks import model_param_masks, neuron_layout


def _smaller(mod: nn.Module, rows: np.ndarray, cols: np.ndarray) -> nn.Module:
    out_n, in_n = int(rows.sum()), int(cols.sum())
    ref = next(itertools.chain(mod.parameters(), mod.buffers()))  # the sub-model lives where the model does
    device, dtype = ref.device, ref.dtype
    if isinstance(mod, nn.Linear):
        return nn.Linear(in_n, out_n, bias=mod.bias is not None, device=device, dtype=dtype)
    if isinstance(mod, nn.Conv2d):
        if mod.groups != 1:
            raise ValueError(f"cannot cut a grouped convolution (groups={mod.groups}) into a sub-model")
        conv = (mod.kernel_size, mod.stride, mod.padding, mod.dilation)
        return nn.Conv2d(in_n, out_n, *conv, bias=mod.bias is not None, device=device, dtype=dtype)  # type: ignore[arg-type]
    if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
        return type(mod)(out_n, mod.eps, mod.momentum, mod.affine, mod.track_running_stats, device=device, dtype=dtype)
    raise ValueError(f"cannot cut a {type(mod).__name__} into a sub-model")


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def extract_submodel(model: nn.Module, neuron_masks: list[np.ndarray]) -> tuple[nn.Module, dict[str, np.ndarray]]:
    """The sub-model keeping ``neuron_masks`` (one bool vector per hidden layer), with
    the full model's current values, and the parameter masks that map it back."""
    masks = model_param_masks(model, neuron_masks)
    sub = copy.deepcopy(model)
    for layer in neuron_layout(model).layers:
        w = masks[f"{layer.name}.weight"]
        rows = np.asarray(w.reshape(w.shape[0], -1).any(axis=1))
        cols = np.asarray(w.reshape(w.shape[0], w.shape[1], -1).any(axis=(0, 2)))
        _replace(sub, layer.name, _smaller(model.get_submodule(layer.name), rows, cols))
        if layer.norm is not None:
            _replace(sub, layer.norm, _smaller(model.get_submodule(layer.norm), rows, rows))
    full = model.state_dict()
    small = sub.state_dict()
    values = {}
    for k, ref in small.items():
        src = full[k]
        values[k] = src[torch.from_numpy(masks[k]).to(src.device)].reshape(ref.shape) if k in masks else src.clone()
    sub.load_state_dict(values)
    return sub, masks


@torch.no_grad()
def write_back(model: nn.Module, sub: nn.Module, masks: dict[str, np.ndarray]) -> None:
    """Copy the sub-model's values into ``model`` at the masked positions (in place)."""
    full = model.state_dict()
    for k, v in sub.state_dict().items():
        if k in masks:
            full[k][torch.from_numpy(masks[k]).to(v.device)] = v.reshape(-1)
        else:
            full[k].copy_(v)
