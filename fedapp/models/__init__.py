"""Model zoo: build a model by name for a dataset's input shape and class count."""

from __future__ import annotations

import math

import torch
from torch import nn

from fedapp.config import RunConfig
from fedapp.models.cnn import cnn
from fedapp.models.mlp import mlp


def build_model(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int, seed: int | None = None) -> nn.Module:
    """Build ``cfg.model``; with ``seed`` the initial weights are reproducible."""
    if seed is not None:
        torch.manual_seed(seed)
    if cfg.model == "mlp":
        return mlp(math.prod(in_shape), cfg.hidden_widths, num_classes)
    if cfg.model == "cnn":
        return cnn(in_shape, num_classes)
    raise ValueError(f"run-config key 'model' = {cfg.model!r} is not a known model")
