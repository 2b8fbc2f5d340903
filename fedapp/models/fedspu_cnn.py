"""The FedSPU paper's CNNs (spec fedspu.md §4, from its public code).

Sampled neurons are the conv channels (and CIFAR's fc1/fc2 units); the flatten size
is computed from the input shape, so the same builders run on other image sizes.
Parameter counts on the paper's inputs: EMNIST 64,722; CIFAR-10 134,902; Speech 26,285.
"""

from __future__ import annotations

import torch
from torch import nn


def _flat(features: nn.Module, in_shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        return int(features(torch.zeros(1, *in_shape)).numel())


def emnist_cnn(in_shape: tuple[int, ...], num_classes: int) -> nn.Sequential:
    """conv3x3(C->20)-BN-ReLU-pool -> conv3x3(20->20)-BN-ReLU-pool -> FC(num_classes)."""
    c = in_shape[0]
    f = nn.Sequential(
        nn.Conv2d(c, 20, 3, padding=1), nn.BatchNorm2d(20), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(20, 20, 3, padding=1), nn.BatchNorm2d(20), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
    )  # fmt: skip
    return nn.Sequential(*f, nn.Linear(_flat(f, in_shape), num_classes))


def cifar_cnn(in_shape: tuple[int, ...], num_classes: int) -> nn.Sequential:
    """LeNet-style: conv(C->6)-BN-pool, conv(6->16)-BN-pool, FC 120, FC 84 (no biases), FC out."""
    c = in_shape[0]
    f = nn.Sequential(
        nn.Conv2d(c, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
    )  # fmt: skip
    return nn.Sequential(
        *f, nn.Linear(_flat(f, in_shape), 120, bias=False), nn.ReLU(), nn.Linear(120, 84, bias=False), nn.ReLU(), nn.Linear(84, num_classes)
    )


def speech_cnn(in_shape: tuple[int, ...], num_classes: int) -> nn.Sequential:
    """conv2x2 s2 p2(C->50)-BN-ReLU-pool -> conv2x2 s2 p2(50->50)-BN-ReLU-pool -> FC(num_classes)."""
    c = in_shape[0]
    f = nn.Sequential(
        nn.Conv2d(c, 50, 2, stride=2, padding=2), nn.BatchNorm2d(50), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(50, 50, 2, stride=2, padding=2), nn.BatchNorm2d(50), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
    )  # fmt: skip
    return nn.Sequential(*f, nn.Linear(_flat(f, in_shape), num_classes))
