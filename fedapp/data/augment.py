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

import torch
import torch.nn.functional as F

from fedapp.train import Augment, uniform

AUGMENTS = ("auto", "none", "crop-flip", "flip-rotate-crop")


def hflip(x: torch.Tensor, gen: torch.Generator, p: float = 0.5) -> torch.Tensor:
    flip = uniform((x.shape[0],), gen, x.device) < p
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


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
    f = fill.view(1, -1, 1, 1)
    return F.grid_sample(x - f, grid, mode="nearest", padding_mode="zeros", align_corners=False) + f


def random_rotate(x: torch.Tensor, gen: torch.Generator, degrees: float, fill: torch.Tensor) -> torch.Tensor:
    angles = (uniform((x.shape[0],), gen, x.device) * 2 - 1) * degrees
    return rotate(x, angles, fill)


def crop(x: torch.Tensor, tops: torch.Tensor, lefts: torch.Tensor, pad: int, fill: torch.Tensor) -> torch.Tensor:
    """Pad each side by ``pad`` with ``fill`` and cut the (H, W) window at (top, left) per image."""
    n, c, h, w = x.shape
    padded = fill.view(1, -1, 1, 1).expand(n, c, h + 2 * pad, w + 2 * pad).clone()
    padded[:, :, pad : pad + h, pad : pad + w] = x
    ar = torch.arange(max(n, c, h, w), device=x.device)
    rows = (tops[:, None] + ar[:h])[:, None, :, None]
    cols = (lefts[:, None] + ar[:w])[:, None, None, :]
    return padded[ar[:n, None, None, None], ar[None, :c, None, None], rows, cols]


def random_crop(x: torch.Tensor, gen: torch.Generator, pad: int, fill: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    tops = torch.randint(0, 2 * pad + 1, (n,), generator=gen, device=gen.device).to(x.device, non_blocking=True)
    lefts = torch.randint(0, 2 * pad + 1, (n,), generator=gen, device=gen.device).to(x.device, non_blocking=True)
    return crop(x, tops, lefts, pad, fill)


def make_augment(name: str, black: torch.Tensor) -> Augment | None:
    """The augmentation called ``name``; ``black`` is the normalised value of a black pixel per
    channel, on the device the minibatches will be on."""
    if name == "none":
        return None
    zero = torch.zeros_like(black)
    if name == "crop-flip":
        return lambda x, gen: hflip(random_crop(x, gen, 4, black), gen)
    if name == "flip-rotate-crop":
        return lambda x, gen: random_crop(random_rotate(hflip(x, gen), gen, 15.0, black), gen, 4, zero)
    raise ValueError(f"run-config key 'augment' = {name!r} is not allowed: expected one of {', '.join(AUGMENTS)}")
