"""Model zoo: build a model by name for a dataset's input shape and class count."""

from __future__ import annotations

import math

import torch
from torch import nn

from fedapp.config import RunConfig
from fedapp.models.cnn import cnn
from fedapp.models.cnn_bn import cnn_bn
from fedapp.models.fedspu_cnn import cifar_cnn, emnist_cnn, speech_cnn
from fedapp.models.mlp import mlp

PAPER_CNNS = {"fedspu-emnist": emnist_cnn, "fedspu-cifar10": cifar_cnn, "fedspu-speech": speech_cnn}


def build_model(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int, seed: int | None = None) -> nn.Module:
    """Build ``cfg.model``; with ``seed`` the initial weights are reproducible."""
    if seed is not None:
        torch.default_generator.manual_seed(seed)  # CPU init only; torch.manual_seed also walks every accelerator (~15 ms)
    if cfg.model == "mlp":
        return mlp(math.prod(in_shape), cfg.hidden_widths, num_classes)
    if cfg.model == "cnn":
        return cnn(in_shape, num_classes)
    if cfg.model == "cnn-bn":
        return cnn_bn(in_shape, num_classes)
    if cfg.model in ("resnet8", "resnet18"):
        from fedapp.models import resnet  # torchvision takes ~1.5 s to import: only the ResNets need it

        return resnet.resnet8(in_shape, num_classes) if cfg.model == "resnet8" else resnet.resnet18(in_shape, num_classes)
    if cfg.model in PAPER_CNNS:
        if len(in_shape) != 3:
            raise ValueError(f"model {cfg.model!r} needs image inputs (C, H, W); this dataset has feature shape {in_shape}")
        return PAPER_CNNS[cfg.model](in_shape, num_classes)
    raise ValueError(f"run-config key 'model' = {cfg.model!r} is not a known model")
