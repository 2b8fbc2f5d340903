"""Analytic communication and computation of a layer-group schedule (fedpart.md §1.4).

Communication: 4 bytes per uploaded fp32 parameter. Computation, per training sample,
with multiply-accumulates counted as FLOPs and backward = 2 x forward: a full round
costs 3*F(all); a round training group k costs F(all) + 2*sum_{j >= k} F(j), because
autograd stops at the shallowest trainable group. F(j) is the forward MACs of the
Conv2d/Linear layers in group j (BatchNorm, pooling and activations are not counted).
"""

from __future__ import annotations

import torch
from torch import nn

from fedapp.core.masks import LayerGroup
from fedapp.methods.layer_schedule import FULL


@torch.no_grad()
def forward_macs(model: nn.Module, in_shape: tuple[int, ...]) -> dict[str, int]:
    """Forward MACs of one sample for every Conv2d and Linear module, by module name."""
    macs: dict[str, int] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Conv2d):
            per_out = mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1]
        elif isinstance(mod, nn.Linear):
            per_out = mod.in_features
        else:
            continue

        def hook(_m: nn.Module, _i: object, out: torch.Tensor, name: str = name, per_out: int = per_out) -> None:
            macs[name] = macs.get(name, 0) + out[0].numel() * per_out

        hooks.append(mod.register_forward_hook(hook))
    was_training = model.training
    model.eval()
    try:
        model(torch.zeros(1, *in_shape, device=next(model.parameters()).device))  # "meta" models work too
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return macs


def group_macs(model: nn.Module, in_shape: tuple[int, ...], groups: list[LayerGroup]) -> list[int]:
    """Forward MACs per sample of each layer group."""
    owner = {p: i for i, g in enumerate(groups) for p in g.params}
    out = [0] * len(groups)
    for name, m in forward_macs(model, in_shape).items():
        out[owner[f"{name}.weight" if name else "weight"]] += m
    return out


def round_macs(entry: int, macs: list[int]) -> int:
    """Training MACs per sample of one schedule entry (a group index or FULL)."""
    total = sum(macs)
    return 3 * total if entry == FULL else total + 2 * sum(macs[entry:])


def round_params(entry: int, sizes: list[int]) -> int:
    """Parameters one client uploads in a round of this schedule entry."""
    return sum(sizes) if entry == FULL else sizes[entry]


def group_sizes(model: nn.Module, groups: list[LayerGroup]) -> list[int]:
    params = dict(model.named_parameters())
    return [sum(params[p].numel() for p in g.params) for g in groups]
