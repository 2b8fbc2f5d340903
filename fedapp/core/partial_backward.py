"""Structured partial backward: frozen neurons' gradients are never computed (FedSPU).

FedSPU trains a full model of which only some neurons are active; a weight is active when
both neurons it connects are, so its gradient mask is an outer product of a row set and a
column set. Masking the gradient after a full backward costs the same at every active
fraction. Here, in a plain sequential CNN:

* every Conv2d with such a mask computes its weight (and bias) gradient on the active block
  only, with the kernel autograd calls (``convolution_backward``) on the sliced operands;
  the frozen entries get zeros, which the mask would have made anyway;
* its input gradient stays exact, since frozen neurons still carry the gradient back to
  earlier active ones; only the second weight layer computes it at the first layer's active
  channels alone, because nothing upstream of the first layer's frozen channels trains;
* the first block (Conv2d, then BatchNorm2d / ReLU / MaxPool2d) runs its backward on the
  active channels only, with autograd's own kernels on the channel slices.

The forward pass is the same kernels on the same tensors. Linear layers keep autograd's
backward: MKL's GEMM does not give the same bits on column slices of small matrices
(measured), and on small batches the gather costs more than it saves.

Exactness rests on each kernel computing a channel (or weight row) the same way within a
slice as within the whole tensor; ``tests/test_partial_backward.py`` checks the trained
models bit for bit against the masked backward on CPU. On other devices (cuDNN and cuBLAS
pick algorithms by shape) the training loop keeps the masked backward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedapp.core.masks import neuron_layout
from fedapp.core.wire import outer_factors

aten = torch.ops.aten
TAIL = (nn.BatchNorm2d, nn.ReLU, nn.MaxPool2d)  # what the first block's backward handles per channel
CHANNELWISE = (*TAIL, nn.BatchNorm1d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Identity)  # map channel c to channel c

Segment = Callable[[torch.Tensor], torch.Tensor]

VERDICTS: dict[tuple[Any, ...], bool] = {}
"""Per shape (and thread count): whether the sliced kernels gave autograd's bits. The first
backward of each shape computes both, keeps autograd's, and records the verdict; a shape whose
slices differ keeps autograd's backward for the rest of the process."""


@dataclass(frozen=True)
class Block:
    """One Conv2d's active block: rows (output channels) and cols (input channels);
    ``input_cols``: where its input gradient is needed (None: everywhere)."""

    conv: nn.Conv2d
    rows: torch.Tensor
    cols: torch.Tensor
    input_cols: torch.Tensor | None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _PartialConv2d.apply(x, self.conv.weight, self.conv.bias, self)
        return out


def _conv_backward(
    conv: nn.Conv2d, g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, mask: list[bool]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten.convolution_backward`` as autograd calls it for ``conv`` (only what ``mask`` asks)."""
    bias = [w.shape[0]] if conv.bias is not None else None
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = aten.convolution_backward(
        g, x, w, bias, list(conv.stride), list(conv.padding), list(conv.dilation), False, [0, 0], conv.groups, mask
    )
    return out


def _scatter(like: torch.Tensor, dim: int, index: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    return like.new_zeros(like.shape).index_copy_(dim, index, part)


def _weight_grads(
    conv: nn.Conv2d, rows: torch.Tensor, cols: torch.Tensor, g: torch.Tensor, x: torch.Tensor, need: tuple[bool, bool]
) -> list[Any]:
    """Weight and bias gradients of ``conv`` on the (rows, cols) block, zeros elsewhere; ``g``
    holds the output gradient of the active rows only."""
    w = conv.weight
    w_block = w.index_select(0, rows) if len(cols) == w.shape[1] else w.index_select(0, rows).index_select(1, cols)
    x_block = x if len(cols) == x.shape[1] else x.index_select(1, cols)
    want_b = need[1] and conv.bias is not None
    _, gw, gb = _conv_backward(conv, g, x_block, w_block, [False, need[0], want_b])
    if need[0]:
        gw = _scatter(w, 0, rows, gw if len(cols) == w.shape[1] else _scatter(w[: len(rows)], 1, cols, gw))
    return [gw if need[0] else None, _scatter(gb.new_empty(w.shape[0]), 0, rows, gb) if want_b else None]


class _PartialConv2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, block: Block) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.block = block
        c = block.conv
        return F.conv2d(x, weight, bias, c.stride, c.padding, c.dilation, c.groups)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (x,) = ctx.saved_tensors
        b: Block = ctx.block
        need = tuple(ctx.needs_input_grad[:3])
        n_in = None if b.input_cols is None else len(b.input_cols)
        key = ("conv", tuple(x.shape), tuple(b.conv.weight.shape), len(b.rows), len(b.cols), n_in, need, torch.get_num_threads())
        if VERDICTS.get(key) is False:
            return (*_conv_full(b.conv, g, x, need), None)
        part = _conv_partial(b, g, x, need)
        if key not in VERDICTS:
            full = _conv_full(b.conv, g, x, need)
            pairs = [(part[0], full[0], b.input_cols, 1), (part[1], full[1], b.rows, 0), (part[2], full[2], b.rows, 0)]
            VERDICTS[key] = _same(pairs, b.cols)
            return (*full, None)
        return (*part, None)


def _conv_full(conv: nn.Conv2d, g: torch.Tensor, x: torch.Tensor, need: tuple[bool, ...]) -> list[torch.Tensor | None]:
    """Autograd's own backward of ``conv`` (one ``convolution_backward`` call)."""
    want = [need[0], need[1], need[2] and conv.bias is not None]
    out = _conv_backward(conv, g, x, conv.weight, want)
    return [t if w else None for t, w in zip(out, want, strict=True)]


def _conv_partial(b: Block, g: torch.Tensor, x: torch.Tensor, need: tuple[bool, ...]) -> list[torch.Tensor | None]:
    gx = None
    if need[0]:
        if b.input_cols is None:
            gx = _conv_backward(b.conv, g, x, b.conv.weight, [True, False, False])[0]
        else:
            cols = b.input_cols
            part = _conv_backward(b.conv, g, x.index_select(1, cols), b.conv.weight.index_select(1, cols), [True, False, False])[0]
            gx = _scatter(x, 1, cols, part)
    return [gx, *_weight_grads(b.conv, b.rows, b.cols, g.index_select(1, b.rows), x, (need[1], need[2]))]


def _same(pairs: list[tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, int]], cols: torch.Tensor | None = None) -> bool:
    """Whether each partial gradient equals the full one where it counts: along ``dim`` at
    ``index`` (all of it when None), and for a weight (4-D) at the active columns too."""
    for part, full, index, dim in pairs:
        if part is None or full is None:
            continue
        if index is not None:
            part, full = part.index_select(dim, index), full.index_select(dim, index)
        if cols is not None and part.dim() == 4 and dim == 0:
            part, full = part.index_select(1, cols), full.index_select(1, cols)
        if not torch.equal(part, full):
            return False
    return True


@dataclass(frozen=True)
class FirstBlock:
    """The first Conv2d and the channel-wise layers after it, backward on ``rows`` only."""

    conv: nn.Conv2d
    tail: tuple[nn.Module, ...]
    rows: torch.Tensor

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:  # its backward returns no input gradient
            return _run([self.conv, *self.tail], x)
        out: torch.Tensor = _FirstBlock.apply(x, self, *_block_params(self))
        return out


def _bn_momentum(bn: nn.BatchNorm2d) -> float:
    """What ``_BatchNorm.forward`` passes as momentum in train mode (and its counter update)."""
    assert bn.num_batches_tracked is not None
    bn.num_batches_tracked.add_(1)
    return 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum


class _FirstBlock(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, spec: FirstBlock, *params: torch.Tensor) -> torch.Tensor:
        c = spec.conv
        h = F.conv2d(x, c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)
        saved: list[tuple[Any, ...]] = []
        for mod in spec.tail:
            if isinstance(mod, nn.BatchNorm2d):
                out, mean, invstd = aten.native_batch_norm(
                    h, mod.weight, mod.bias, mod.running_mean, mod.running_var, True, _bn_momentum(mod), mod.eps
                )
                saved.append((mod, h, mean, invstd))
            elif isinstance(mod, nn.ReLU):
                out = torch.relu(h)
                saved.append((mod, out))
            else:
                out, idx = aten.max_pool2d_with_indices(h, mod.kernel_size, mod.stride, mod.padding, mod.dilation, mod.ceil_mode)
                saved.append((mod, h, idx))
            h = out
        ctx.spec, ctx.saved, ctx.x = spec, saved, x
        return h

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        spec: FirstBlock = ctx.spec
        shapes = tuple((type(m).__name__, tuple(t[0].shape)) for m, *t in ctx.saved)
        key = ("first", tuple(ctx.x.shape), tuple(spec.conv.weight.shape), len(spec.rows), shapes, torch.get_num_threads())
        if VERDICTS.get(key) is False:
            return _first_grads(ctx, spec, g, None)
        part = _first_grads(ctx, spec, g, spec.rows)
        if key not in VERDICTS:
            full = _first_grads(ctx, spec, g, None)
            VERDICTS[key] = _same([(a, b, spec.rows, 0) for a, b in zip(part[2:], full[2:], strict=True)])
            return full
        return part


def _first_grads(ctx: Any, spec: FirstBlock, g: torch.Tensor, rows: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The first block's parameter gradients, on ``rows`` only (zeros elsewhere) or, with None,
    on every channel: then autograd's own kernels on the whole tensors."""
    pick = (lambda t, dim=1: t) if rows is None else (lambda t, dim=1: t.index_select(dim, rows))
    full = lambda like, part: part if rows is None else _scatter(like, 0, rows, part)  # noqa: E731
    grads: dict[int, torch.Tensor] = {}
    g = pick(g)
    for mod, *t in reversed(ctx.saved):
        if isinstance(mod, nn.MaxPool2d):
            h, idx = t
            g = aten.max_pool2d_with_indices_backward(
                g, pick(h), _pair(mod.kernel_size), _pair(mod.stride), _pair(mod.padding), _pair(mod.dilation), mod.ceil_mode, pick(idx)
            )
        elif isinstance(mod, nn.ReLU):
            g = aten.threshold_backward(g, pick(t[0]), 0)
        else:
            h, mean, invstd = t
            rm, rv = (mod.running_mean, mod.running_var) if rows is None else (None, None)
            g, gw, gb = aten.native_batch_norm_backward(
                g, pick(h), pick(mod.weight, 0), rm, rv, pick(mean, 0), pick(invstd, 0), True, mod.eps, [True, True, True]
            )
            grads[id(mod.weight)], grads[id(mod.bias)] = full(mod.weight, gw), full(mod.bias, gb)
    conv = spec.conv
    if rows is None:
        _, gw, gb = _conv_full(conv, g, ctx.x, (False, True, True))
    else:
        gw, gb = _weight_grads(conv, rows, torch.arange(conv.in_channels, device=rows.device), g, ctx.x, (True, True))
    grads[id(conv.weight)] = gw
    if gb is not None:
        grads[id(conv.bias)] = gb
    return (None, None, *(grads.get(id(p)) for p in _block_params(spec)))


def _pair(v: Any) -> list[int]:
    return [v, v] if isinstance(v, int) else list(v)


def _block_params(spec: FirstBlock) -> list[torch.Tensor]:
    return [p for m in (spec.conv, *spec.tail) for p in m.parameters(recurse=False)]


def _factors(mask: torch.Tensor, in_width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Row and input-channel masks of a weight mask that is an outer product, else None."""
    m = mask.detach().to("cpu", torch.bool).numpy()
    per_channel = m.reshape(m.shape[0], in_width, -1)
    if not (per_channel == per_channel[:, :, :1]).all():
        return None
    return outer_factors(per_channel[:, :, 0])


def plain_sequential(model: nn.Module) -> bool:
    """A Sequential of Conv2d/Linear and channel-wise layers only: no skips, no channel mixing."""
    if not isinstance(model, nn.Sequential):
        return False
    for mod in model:
        if isinstance(mod, nn.Conv2d):
            if mod.groups != 1 or mod.padding_mode != "zeros" or isinstance(mod.padding, str):
                return False
        elif isinstance(mod, nn.BatchNorm2d):
            if not (mod.affine and mod.track_running_stats):
                return False
        elif isinstance(mod, nn.MaxPool2d):
            if mod.return_indices:
                return False
        elif not isinstance(mod, (nn.Linear, *CHANNELWISE)):
            return False
    return True


def _rows(mask: torch.Tensor) -> np.ndarray:
    m = mask.detach().to("cpu", torch.bool).numpy()
    return np.asarray(m.reshape(m.shape[0], -1).any(axis=1))


def plan(model: nn.Module, masks: dict[str, torch.Tensor]) -> list[Segment] | None:
    """The model's forward as segments that skip frozen gradients (None: nothing to skip)."""
    if not plain_sequential(model) or not masks:
        return None
    layout = neuron_layout(model)
    names = {mod: name for name, mod in model.named_modules()}
    device = next(model.parameters()).device

    def index(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.flatnonzero(a)).to(device)

    modules = list(model.children())
    first = next(i for i, m in enumerate(modules) if isinstance(m, (nn.Conv2d, nn.Linear)))
    head = _first_block(modules, first, names, masks)
    segments: list[Segment] = list(modules[:first])
    i = first
    if head is not None:
        conv = modules[first]
        assert isinstance(conv, nn.Conv2d)  # _first_block returns None otherwise
        spec = FirstBlock(conv, head[0], index(head[1]))
        segments.append(spec)
        i = first + 1 + len(head[0])
    for mod in modules[i:]:
        segments.append(mod)
        if not isinstance(mod, nn.Conv2d) or not mod.weight.requires_grad or f"{names[mod]}.weight" not in masks:
            continue
        layer = next(k for k, lay in enumerate(layout.layers) if lay.name == names[mod])
        factors = _factors(masks[f"{names[mod]}.weight"], mod.in_channels)
        if factors is None or not factors[0].any():
            continue
        rows, cols = factors
        input_cols = head[1] if head is not None and layer == 1 else None
        if rows.all() and cols.all() and input_cols is None:
            continue
        block = Block(mod, index(rows), index(cols), None if input_cols is None else index(input_cols))
        segments[-1] = block
    if head is None and all(isinstance(s, nn.Module) for s in segments):
        return None
    return segments


def _first_block(
    modules: list[nn.Module], first: int, names: dict[nn.Module, str], masks: dict[str, torch.Tensor]
) -> tuple[tuple[nn.Module, ...], np.ndarray] | None:
    """The first Conv2d's channel-wise tail and the channels any of its parameters trains
    (None: it is no Conv2d, a parameter of it trains unmasked, or all channels train)."""
    conv = modules[first]
    if not isinstance(conv, nn.Conv2d) or any(p.requires_grad for m in modules[:first] for p in m.parameters()):
        return None
    tail: list[nn.Module] = []
    for mod in modules[first + 1 :]:
        if not isinstance(mod, TAIL):
            break
        tail.append(mod)
    needed = np.zeros(conv.out_channels, bool)
    for mod in (conv, *tail):
        for p_name, p in mod.named_parameters(recurse=False):
            if not p.requires_grad:
                return None  # the block's backward returns every parameter's gradient
            mask = masks.get(f"{names[mod]}.{p_name}")
            if mask is None:
                return None
            needed |= _rows(mask)
    if needed.all() or not needed.any():
        return None
    return tuple(tail), needed


def _run(segments: list[Segment], x: torch.Tensor) -> torch.Tensor:
    for s in segments:
        x = s(x)
    return x


@contextlib.contextmanager
def partial_backward(model: nn.Module, masks: dict[str, torch.Tensor]) -> Iterator[bool]:
    """Within the block the model's forward runs ``plan``'s segments; yields whether it does.
    CPU only (see the module docstring); the model is left as it was."""
    segments = plan(model, masks) if next(model.parameters()).device.type == "cpu" and "forward" not in vars(model) else None
    if segments is None:
        yield False
        return
    model.forward = lambda x: _run(segments, x)  # type: ignore[method-assign]
    try:
        yield True
    finally:
        del model.forward
