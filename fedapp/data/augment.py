"""Training-time augmentation on normalised float minibatches (N, C, H, W), seeded by
the client's torch.Generator so a run is reproducible.

Batched re-implementations of torchvision's RandomHorizontalFlip, RandomRotation
(nearest, no expand) and RandomCrop(size, padding), with explicit fill values so the
order of the papers' pipelines is kept even though we normalise before augmenting:
- "crop-flip" (FedSelect's code): RandomCrop(pad 4) + HFlip on the PIL image, so the
  padding is black, i.e. the normalised value of 0.
- "flip-rotate-crop" (Fling, FedPart's CIFAR-100): ToTensor -> HFlip(0.5) -> Rotation(15)
  (fill black) -> Normalize -> RandomCrop(32, pad 4) (fill 0 *after* normalising).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedapp.core.train import Augment

AUGMENTS = ("auto", "none", "crop-flip", "flip-rotate-crop")


def hflip(x: torch.Tensor, gen: torch.Generator, p: float = 0.5) -> torch.Tensor:
    return Pipeline((Flip(p),))(x, gen)


def flip_where(x: torch.Tensor, u: torch.Tensor, p: float) -> torch.Tensor:
    """Mirror the images whose uniform draw ``u`` is below ``p``."""
    return torch.where((u < p)[:, None, None, None], x.flip(-1), x)


def _fill4(fill: torch.Tensor) -> torch.Tensor:
    """A fill of (C,) for every image, or (N, C) one per image, shaped to broadcast over (N, C, H, W)."""
    return fill.view(1, -1, 1, 1) if fill.dim() == 1 else fill.view(fill.shape[0], -1, 1, 1)


def rotate(x: torch.Tensor, angles: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """Rotate each image counter-clockwise by ``angles`` degrees about its centre (nearest)."""
    _n, _, h, w = x.shape
    rad = angles.to(torch.float32) * (math.pi / 180)
    cos, sin = torch.cos(rad), torch.sin(rad)
    # output pixel centre (u, v) relative to the image centre, in pixels; sample the input at R(-a)·(u, v)
    ys = torch.arange(h, dtype=torch.float32, device=x.device) + 0.5 - h / 2
    xs = torch.arange(w, dtype=torch.float32, device=x.device) + 0.5 - w / 2
    v, u = torch.meshgrid(ys, xs, indexing="ij")
    src_x = cos[:, None, None] * u - sin[:, None, None] * v
    src_y = sin[:, None, None] * u + cos[:, None, None] * v
    grid = torch.stack([src_x / (w / 2), src_y / (h / 2)], dim=-1)
    f = _fill4(fill)
    return F.grid_sample(x - f, grid, mode="nearest", padding_mode="zeros", align_corners=False) + f


def random_rotate(x: torch.Tensor, gen: torch.Generator, degrees: float, fill: torch.Tensor) -> torch.Tensor:
    return Pipeline((Rotate(degrees, fill),))(x, gen)


def crop(x: torch.Tensor, tops: torch.Tensor, lefts: torch.Tensor, pad: int, fill: torch.Tensor) -> torch.Tensor:
    """Pad each side by ``pad`` with ``fill`` and cut the (H, W) window at (top, left) per image."""
    n, c, h, w = x.shape
    padded = _fill4(fill).expand(n, c, h + 2 * pad, w + 2 * pad).clone()
    padded[:, :, pad : pad + h, pad : pad + w] = x
    ar = torch.arange(max(n, c, h, w), device=x.device)
    rows = (tops[:, None] + ar[:h])[:, None, :, None]
    cols = (lefts[:, None] + ar[:w])[:, None, None, :]
    return padded[ar[:n, None, None, None], ar[None, :c, None, None], rows, cols]


def random_crop(x: torch.Tensor, gen: torch.Generator, pad: int, fill: torch.Tensor) -> torch.Tensor:
    return Pipeline((Crop(pad, fill),))(x, gen)


@dataclass(frozen=True, eq=False)
class Flip:
    """RandomHorizontalFlip(p): one uniform per image."""

    p: float = 0.5

    def key(self) -> tuple[str, float]:
        return ("flip", self.p)

    def draw(self, n: int, gen: torch.Generator) -> list[torch.Tensor]:
        return [torch.rand((n,), generator=gen, device=gen.device)]

    def apply(self, x: torch.Tensor, drawn: Sequence[torch.Tensor], fill: torch.Tensor | None) -> torch.Tensor:
        return flip_where(x, drawn[0], self.p)


@dataclass(frozen=True, eq=False)
class Rotate:
    """RandomRotation(degrees), nearest, filled with ``fill``: one uniform per image."""

    degrees: float
    fill: torch.Tensor

    def key(self) -> tuple[str, float]:
        return ("rotate", self.degrees)

    def draw(self, n: int, gen: torch.Generator) -> list[torch.Tensor]:
        return [torch.rand((n,), generator=gen, device=gen.device)]

    def apply(self, x: torch.Tensor, drawn: Sequence[torch.Tensor], fill: torch.Tensor | None) -> torch.Tensor:
        return rotate(x, (drawn[0] * 2 - 1) * self.degrees, self.fill if fill is None else fill)


@dataclass(frozen=True, eq=False)
class Crop:
    """RandomCrop(size, padding=pad) filled with ``fill``: a top, then a left offset per image."""

    pad: int
    fill: torch.Tensor

    def key(self) -> tuple[str, float]:
        return ("crop", self.pad)

    def draw(self, n: int, gen: torch.Generator) -> list[torch.Tensor]:
        return [torch.randint(0, 2 * self.pad + 1, (n,), generator=gen, device=gen.device) for _ in range(2)]

    def apply(self, x: torch.Tensor, drawn: Sequence[torch.Tensor], fill: torch.Tensor | None) -> torch.Tensor:
        return crop(x, drawn[0], drawn[1], self.pad, self.fill if fill is None else fill)


Op = Flip | Rotate | Crop


@dataclass(frozen=True, eq=False)
class Pipeline:
    """Ops applied in order. Called as a ``train.Augment`` it draws from the generator and applies
    at once; the batched kernel instead draws every minibatch's values up front (``draw``, the
    same generator calls in the same order) and applies them to a whole chunk later (``apply``)."""

    ops: tuple[Op, ...]

    def draw(self, n: int, gen: torch.Generator) -> list[torch.Tensor]:
        """The draws for a minibatch of ``n`` images, on the generator's device, in call order."""
        return [d for op in self.ops for d in op.draw(n, gen)]

    def structure(self) -> tuple[tuple[str, float], ...]:
        """The ops and their parameters, fills left out (``apply`` takes fills per image)."""
        return tuple(op.key() for op in self.ops)

    def fills(self) -> list[torch.Tensor | None]:
        return [getattr(op, "fill", None) for op in self.ops]

    def apply(self, x: torch.Tensor, drawn: Sequence[torch.Tensor], fills: Sequence[torch.Tensor | None] | None = None) -> torch.Tensor:
        """Apply to (N, C, H, W) the ``draw`` values (each (N,), on x's device); ``fills``: per op
        an (N, C) fill per image in place of the op's own (None: the op's)."""
        k = 0
        for i, op in enumerate(self.ops):
            used = 2 if isinstance(op, Crop) else 1
            x = op.apply(x, drawn[k : k + used], None if fills is None else fills[i])
            k += used
        return x

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        return self.apply(x, [d.to(x.device, non_blocking=True) for d in self.draw(x.shape[0], gen)])


def make_augment(name: str, black: torch.Tensor) -> Augment | None:
    """The augmentation called ``name`` (a ``Pipeline``); ``black`` is the normalised value of a
    black pixel per channel, on the device the minibatches will be on."""
    if name == "none":
        return None
    zero = torch.zeros_like(black)
    if name == "crop-flip":
        return Pipeline((Crop(4, black), Flip()))
    if name == "flip-rotate-crop":
        return Pipeline((Flip(), Rotate(15.0, black), Crop(4, zero)))
    raise ValueError(f"run-config key 'augment' = {name!r} is not allowed: expected one of {', '.join(AUGMENTS)}")
