"""Fully connected nets: the FedPeWS FC net (5-32-64-128-32-4) and digits MLPs."""

from __future__ import annotations

from torch import nn


def mlp(in_features: int, hidden: tuple[int, ...], num_classes: int) -> nn.Sequential:
    """Flatten -> [Linear -> ReLU] per hidden width -> Linear(num_classes)."""
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)
