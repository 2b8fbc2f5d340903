"""The 3-conv CNN of the FedPeWS paper (Table 5), sized from the input shape.

Conv(C->32) -> ReLU -> MaxPool2 -> Conv(32->64) -> ReLU -> MaxPool2 -> Conv(64->128)
-> ReLU -> MaxPool2 -> Flatten -> Linear(num_classes). On 3x32x32 inputs with 20
classes this has 134,228 parameters; on 1x8x8 digits the flatten is 128 features.
"""

from __future__ import annotations

from torch import nn


def cnn(in_shape: tuple[int, ...], num_classes: int, widths: tuple[int, ...] = (32, 64, 128)) -> nn.Sequential:
    if len(in_shape) != 3:
        raise ValueError(f"model 'cnn' needs image inputs (C, H, W); this dataset has feature shape {in_shape}")
    channels, h, w = in_shape
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        channels, h, w = width, h // 2, w // 2
    if h < 1 or w < 1:
        raise ValueError(f"input {in_shape} is too small for {len(widths)} 2x2 poolings")
    layers += [nn.Flatten(), nn.Linear(channels * h * w, num_classes)]
    return nn.Sequential(*layers)
