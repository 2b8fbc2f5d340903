"""ResNets for FedPart (../shared/specs/fedpart.md §1.1), built from torchvision parts.

``resnet8``: ImageNet-style stem (7x7 stride-2 conv, BN, ReLU, 3x3 stride-2 max-pool),
three stages of one torchvision ``BasicBlock`` (widths 64/128/256, stride 2 from the
second stage on, 1x1 conv + BN downsample where the shape changes), global average
pooling and a linear classifier: 1,235,274 parameters for 3x32x32 inputs and 10 classes.
``resnet18``: torchvision's ResNet-18, randomly initialised (never downloaded); the stem
conv is swapped for one with the dataset's channel count when that is not 3.
"""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models import resnet18 as tv_resnet18
from torchvision.models.resnet import BasicBlock


def _stem(in_channels: int) -> nn.Conv2d:
    return nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)


def _image_channels(in_shape: tuple[int, ...], name: str) -> int:
    if len(in_shape) != 3:
        raise ValueError(f"model {name!r} needs image inputs (C, H, W); this dataset has feature shape {in_shape}")
    return in_shape[0]


class ResNet8(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, widths: tuple[int, ...] = (64, 128, 256)):
        super().__init__()
        self.conv1 = _stem(in_channels)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inplanes = 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            downsample = None
            if stride != 1 or inplanes != width:
                downsample = nn.Sequential(nn.Conv2d(inplanes, width, 1, stride=stride, bias=False), nn.BatchNorm2d(width))
            self.add_module(f"layer{i + 1}", nn.Sequential(BasicBlock(inplanes, width, stride, downsample)))
            inplanes = width
        self.stages = [f"layer{i + 1}" for i in range(len(widths))]
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, num_classes)
        for m in self.modules():  # torchvision's ResNet initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for name in self.stages:
            x = getattr(self, name)(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet8(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return ResNet8(_image_channels(in_shape, "resnet8"), num_classes)


def resnet18(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    channels = _image_channels(in_shape, "resnet18")
    model = tv_resnet18(weights=None, num_classes=num_classes)
    if channels != 3:  # same slot in the module order, so the layer groups keep their order
        model.conv1 = _stem(channels)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model
