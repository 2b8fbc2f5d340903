"""Model registry: run-config ``model`` name -> builder ``(cfg, in_shape, num_classes) -> nn.Module``.

A new model is a builder registered here with ``@register_model("name")``; the run-config's
allowed ``model`` values are this registry's names. Builders import their module (and torch)
when called, so the registry, and the config that lists its names, stay light.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from fedapp.core.config import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from fedapp.core.config import RunConfig
    from fedapp.data import Dataset

Builder = Callable[["RunConfig", tuple[int, ...], int], "nn.Module"]
MODELS: dict[str, Builder] = {}


def register_model(name: str) -> Callable[[Builder], Builder]:
    def register(builder: Builder) -> Builder:
        if name in MODELS:
            raise ValueError(f"model {name!r} is registered twice")
        MODELS[name] = builder
        return builder

    return register


def check_model(name: str) -> None:
    """The run-config's ``model`` names a registered model. The config module does not import
    this registry (the registry's ``initial_model`` reads the data, which reads the config), so
    the name is checked here, where a config is resolved (``methods.registry.resolve``)."""
    if name not in MODELS:
        raise ConfigError(f"run-config key 'model' = {name!r} is not allowed: expected one of {', '.join(MODELS)}")


def build_model(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int, seed: int | None = None) -> nn.Module:
    """Build ``cfg.model``; with ``seed`` the initial weights are reproducible."""
    import torch

    if seed is not None:
        torch.default_generator.manual_seed(seed)  # CPU init only; torch.manual_seed also walks every accelerator (~15 ms)
    if cfg.model not in MODELS:
        raise ValueError(f"run-config key 'model' = {cfg.model!r} is not a known model")
    return MODELS[cfg.model](cfg, in_shape, num_classes)


def initial_model(cfg: RunConfig, ds: Dataset | None = None) -> nn.Module:
    """w0: the seeded initial model, which server and clients rebuild identically (on the
    CPU, from the CPU generator; a client loads its values into the model on its device).
    The one place w0 is built: the server loop and each client process call it."""
    import torch

    if ds is None:
        from fedapp.data import dataset_for

        ds = dataset_for(cfg)
    with torch.device("cpu"):
        return build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed)


def _image(name: str, in_shape: tuple[int, ...]) -> None:
    if len(in_shape) != 3:
        raise ValueError(f"model {name!r} needs image inputs (C, H, W); this dataset has feature shape {in_shape}")


@register_model("mlp")
def _mlp(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from fedapp.models.mlp import mlp

    return mlp(math.prod(in_shape), cfg.hidden_widths, num_classes)


@register_model("cnn")
def _cnn(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from fedapp.models.cnn import cnn

    return cnn(in_shape, num_classes)


@register_model("cnn-bn")
def _cnn_bn(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from fedapp.models.cnn_bn import cnn_bn

    return cnn_bn(in_shape, num_classes)


@register_model("resnet8")
def _resnet8(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from fedapp.models import resnet  # torchvision takes ~1.5 s to import: only the ResNets need it

    return resnet.resnet8(in_shape, num_classes)


@register_model("resnet18")
def _resnet18(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from fedapp.models import resnet

    return resnet.resnet18(in_shape, num_classes)


@register_model("fedspu-emnist")
def _fedspu_emnist(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from fedapp.models.fedspu_cnn import emnist_cnn

    _image(cfg.model, in_shape)
    return emnist_cnn(in_shape, num_classes)


@register_model("fedspu-cifar10")
def _fedspu_cifar10(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from fedapp.models.fedspu_cnn import cifar_cnn

    _image(cfg.model, in_shape)
    return cifar_cnn(in_shape, num_classes)


@register_model("fedspu-speech")
def _fedspu_speech(cfg: RunConfig, in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from fedapp.models.fedspu_cnn import speech_cnn

    _image(cfg.model, in_shape)
    return speech_cnn(in_shape, num_classes)
