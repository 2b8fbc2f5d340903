"""Neuron masks, parameter masks and layer groups, derived from the model itself.

Conventions (../shared/specs/fedpews.md §2, fedspu.md §2): hidden neurons are the
outputs of every Linear/Conv2d but the last; inputs and output logits are never
masked; a weight is kept when both neurons it connects are kept; a BatchNorm after
a layer follows that layer's output mask; at a Conv -> Linear flatten, channel c
owns features [c*H*W, (c+1)*H*W).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

WEIGHT_LAYERS = (nn.Linear, nn.Conv2d)
NORM_LAYERS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)


@dataclass(frozen=True)
class WeightLayer:
    name: str  # module name, e.g. "net.0"
    out_width: int
    in_width: int
    norm: str | None  # name of the norm module that follows, if any
    has_bias: bool


@dataclass(frozen=True)
class NeuronLayout:
    """Hidden-neuron structure of a feed-forward (sequential) model."""

    layers: tuple[WeightLayer, ...]

    @property
    def hidden(self) -> tuple[WeightLayer, ...]:
        return self.layers[:-1]

    @property
    def hidden_names(self) -> list[str]:
        return [layer.name for layer in self.hidden]

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(layer.out_width for layer in self.hidden)

    @property
    def total(self) -> int:
        return sum(self.widths)

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Cut a vector over all hidden neurons into one piece per hidden layer."""
        if flat.shape != (self.total,):
            raise ValueError(f"neuron vector has shape {flat.shape}, expected ({self.total},)")
        return np.split(flat, np.cumsum(self.widths)[:-1])

    def pack_neurons(self, neurons: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Neuron masks on the wire: packed bits per hidden layer, by layer name (h / 8 bytes in all)."""
        return {layer.name: np.packbits(m.astype(bool)) for layer, m in zip(self.hidden, neurons, strict=True)}

    def unpack_neurons(self, record: dict[str, np.ndarray], what: str = "neuron mask") -> list[np.ndarray]:
        """The per-layer bool masks ``pack_neurons`` packed; a record naming other layers, or with
        the wrong number of bytes for a layer, is a ValueError naming ``what``."""
        if set(record) != set(self.hidden_names):
            raise ValueError(f"{what!r} names layers {sorted(record)}, model has hidden layers {self.hidden_names}")
        out = []
        for layer in self.hidden:
            bits = record[layer.name]
            if bits.dtype != np.uint8 or bits.shape != ((layer.out_width + 7) // 8,):
                raise ValueError(f"{layer.name}: expected {(layer.out_width + 7) // 8} packed bytes, got {bits.dtype} {bits.shape}")
            out.append(np.unpackbits(bits, count=layer.out_width).astype(bool))
        return out

    def param_masks(self, neuron_masks: list[np.ndarray], extent: str = "outer") -> dict[str, np.ndarray]:
        """Expand per-layer neuron masks to boolean masks for every parameter and BN buffer.

        ``extent="rows"`` keeps incoming weights of kept neurons only (FedPeWS D11 option).
        """
        if len(neuron_masks) != len(self.hidden):
            raise ValueError(f"got {len(neuron_masks)} neuron masks for {len(self.hidden)} hidden layers")
        out: dict[str, np.ndarray] = {}
        prev: np.ndarray | None = None
        for i, layer in enumerate(self.layers):
            m_out = neuron_masks[i].astype(bool) if i < len(self.hidden) else np.ones(layer.out_width, bool)
            if m_out.shape != (layer.out_width,):
                raise ValueError(f"mask for {layer.name} has shape {m_out.shape}, expected ({layer.out_width},)")
            m_in = np.ones(layer.in_width, bool) if prev is None or extent == "rows" else np.repeat(prev, layer.in_width // prev.size)
            out[f"{layer.name}.weight"] = np.outer(m_out, m_in)  # reshaped by caller for conv kernels
            if layer.has_bias:
                out[f"{layer.name}.bias"] = m_out.copy()
            if layer.norm is not None:
                for suffix in ("weight", "bias", "running_mean", "running_var"):
                    out[f"{layer.norm}.{suffix}"] = m_out.copy()
            prev = m_out
        return out


def neuron_layout(model: nn.Module) -> NeuronLayout:
    """Read the hidden-neuron structure of a feed-forward model (Linear/Conv2d in order)."""
    layers: list[WeightLayer] = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            layers.append(WeightLayer(name, mod.out_features, mod.in_features, None, mod.bias is not None))
        elif isinstance(mod, nn.Conv2d):
            layers.append(WeightLayer(name, mod.out_channels, mod.in_channels, None, mod.bias is not None))
        elif isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)) and layers:
            last = layers[-1]
            layers[-1] = WeightLayer(last.name, last.out_width, last.in_width, name, last.has_bias)
    if len(layers) < 2:
        raise ValueError(f"{type(model).__name__} has fewer than two Linear/Conv2d layers: no hidden neurons to mask")
    for prev, cur in itertools.pairwise(layers):
        if cur.in_width % prev.out_width:
            raise ValueError(
                f"{type(model).__name__} is not a plain feed-forward net: {cur.name} takes {cur.in_width} inputs, "
                f"not a multiple of {prev.name}'s {prev.out_width} outputs"
            )
    return NeuronLayout(tuple(layers))


def shape_masks(masks: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Broadcast 2-D [out, in] masks over conv kernel dims so each matches its tensor."""
    out = {}
    for name, m in masks.items():
        shape = shapes[name]
        if m.ndim == 2 and len(shape) == 4:
            m = np.broadcast_to(m[:, :, None, None], shape)
        out[name] = np.ascontiguousarray(m.reshape(shape))
    return out


def model_param_masks(model: nn.Module, neuron_masks: list[np.ndarray], extent: str = "outer") -> dict[str, np.ndarray]:
    """Parameter masks (shaped like each tensor) for a model and per-layer neuron masks."""
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return shape_masks(neuron_layout(model).param_masks(neuron_masks, extent), shapes)


def torch_param_masks(
    layout: NeuronLayout, neuron_masks: list[torch.Tensor], shapes: dict[str, tuple[int, ...]], extent: str = "outer"
) -> dict[str, torch.Tensor]:
    """Differentiable twin of :meth:`NeuronLayout.param_masks` for float neuron masks (learned
    masks with a straight-through estimator): parameter masks shaped like each tensor in
    ``shapes``, through which gradients flow back to ``neuron_masks``. BN buffers are left out."""
    out: dict[str, torch.Tensor] = {}
    prev: torch.Tensor | None = None
    for i, layer in enumerate(layout.layers):
        hidden = i < len(layout.hidden)
        like = neuron_masks[0]
        m_out = neuron_masks[i] if hidden else torch.ones(layer.out_width, dtype=like.dtype, device=like.device)
        if prev is None or extent == "rows":
            m_in = torch.ones(layer.in_width, dtype=m_out.dtype, device=m_out.device)
        else:
            m_in = prev.repeat_interleave(layer.in_width // prev.numel())
        w = torch.outer(m_out, m_in)
        shape = shapes[f"{layer.name}.weight"]
        out[f"{layer.name}.weight"] = w.reshape(*w.shape, *([1] * (len(shape) - 2))).expand(shape) if len(shape) > 2 else w
        if layer.has_bias:
            out[f"{layer.name}.bias"] = m_out
        if layer.norm is not None:
            for suffix in ("weight", "bias"):
                if f"{layer.norm}.{suffix}" in shapes:
                    out[f"{layer.norm}.{suffix}"] = m_out
        prev = m_out
    return out


@dataclass(frozen=True)
class LayerGroup:
    name: str
    params: tuple[str, ...]


def layer_groups(model: nn.Module) -> list[LayerGroup]:
    """Ordered layer groups: each Linear/Conv2d (or other parameterised module) with the
    affine parameters of the norm layer that follows it. Buffers belong to no group.

    Built from module objects in registration order, so a torchvision BasicBlock gives
    conv1+bn1, conv2+bn2, downsample.0+downsample.1, as FedPart expects.
    """
    groups: list[tuple[str, list[str]]] = []
    for name, mod in model.named_modules():
        own = [f"{name}.{p}" if name else p for p, _ in mod.named_parameters(recurse=False)]
        if not own:
            continue
        if isinstance(mod, NORM_LAYERS) and groups:
            groups[-1][1].extend(own)
        else:
            groups.append((name, own))
    return [LayerGroup(n, tuple(ps)) for n, ps in groups]
