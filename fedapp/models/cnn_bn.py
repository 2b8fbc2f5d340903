"""The 6-group digits CNN of the FedPart offline experiments (../shared/specs/fedpart.md §7.1).

5 x [conv3x3 (no bias) + BatchNorm + ReLU] with widths 16/16/32/32/64 and stride 2 at
layers 3 and 5, global average pooling, Linear(num_classes): one layer group per conv
(with its BN) plus the classifier, M = 6. On 1x8x8 digits with 10 classes it has
35,674 parameters and 452,224 forward MACs per sample.
"""

from __future__ import annotations

from torch import nn

WIDTHS = (16, 16, 32, 32, 64)
STRIDES = (1, 1, 2, 1, 2)


def cnn_bn(in_shape: tuple[int, ...], num_classes: int) -> nn.Sequential:
    if len(in_shape) != 3:
        raise ValueError(f"model 'cnn-bn' needs image inputs (C, H, W); this dataset has feature shape {in_shape}")
    channels = in_shape[0]
    layers: list[nn.Module] = []
    for width, stride in zip(WIDTHS, STRIDES, strict=True):
        layers += [nn.Conv2d(channels, width, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
        channels = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]
    return nn.Sequential(*layers)
