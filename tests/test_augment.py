"""Batched augmentation against torchvision's own transforms and hand-built crops, and
the training loop applying it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode

from fedapp.core.train import TrainSettings, local_train
from fedapp.data.augment import crop, hflip, make_augment, rotate
from fedapp.data.dataset import Normalization


def batch(n: int = 8, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def test_rotate_matches_torchvision_rotate_nearest_with_fill() -> None:
    x = batch(6)
    angles = torch.tensor([0.0, 5.0, -10.0, 15.0, -15.0, 7.3])
    fill = torch.tensor([0.2, -0.3, 0.5])
    ours = rotate(x, angles, fill)
    for i, a in enumerate(angles.tolist()):
        ref = TF.rotate(x[i], a, interpolation=InterpolationMode.NEAREST, fill=fill.tolist())
        torch.testing.assert_close(ours[i], ref, atol=1e-6, rtol=0)


def test_crop_is_a_window_of_the_filled_padding() -> None:
    x = batch(5)
    fill = torch.tensor([-1.0, 0.0, 2.0])
    tops, lefts = torch.tensor([0, 8, 4, 3, 8]), torch.tensor([8, 0, 4, 7, 8])
    out = crop(x, tops, lefts, 4, fill)
    for i in range(5):
        padded = torch.stack([F.pad(x[i, c], (4, 4, 4, 4), value=float(fill[c])) for c in range(3)])
        torch.testing.assert_close(out[i], padded[:, tops[i] : tops[i] + 32, lefts[i] : lefts[i] + 32])
    torch.testing.assert_close(out[2], x[2])  # offset (4, 4) is the unshifted image


def test_hflip_flips_about_half_and_nothing_else() -> None:
    x = batch(200)
    out = hflip(x, torch.Generator().manual_seed(1))
    flipped = torch.tensor([torch.equal(out[i], x[i].flip(-1)) for i in range(200)])
    kept = torch.tensor([torch.equal(out[i], x[i]) for i in range(200)])
    assert bool((flipped | kept).all())
    assert 70 < int(flipped.sum()) < 130


def test_presets_pad_with_the_papers_fill_values() -> None:
    """crop-flip pads with black (PIL padding before Normalize); Fling's crop comes after Normalize (pads 0)."""
    norm = Normalization("half", (0.5,) * 3, (0.5,) * 3)
    x = torch.full((64, 3, 32, 32), 0.25)
    gen = torch.Generator().manual_seed(0)
    cf = make_augment("crop-flip", norm.of_black())
    assert cf is not None
    values = set(torch.unique(cf(x, gen)).tolist())
    assert values == {0.25, -1.0}  # black normalised with mean = std = 0.5 is -1
    frc = make_augment("flip-rotate-crop", norm.of_black())
    assert frc is not None
    assert set(torch.unique(frc(x, gen)).tolist()) <= {0.25, -1.0, 0.0} and 0.0 in set(torch.unique(frc(x, gen)).tolist())


def test_training_applies_augmentation_each_step() -> None:
    torch.manual_seed(0)
    x, y = batch(40), torch.randint(0, 3, (40,), generator=torch.Generator().manual_seed(2))
    settings = TrainSettings(epochs=0, steps=5, batch_size=8, lr=0.1)
    seen: list[torch.Tensor] = []

    def record(xb: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        seen.append(xb)
        return xb.flip(-1)

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 3))

    plain, augmented = model(), model()
    local_train(plain, x, y, settings, torch.Generator().manual_seed(3))
    local_train(augmented, x, y, settings, torch.Generator().manual_seed(3), augment=record)
    assert len(seen) == 5 and all(b.shape == (8, 3, 32, 32) for b in seen)
    assert not torch.allclose(plain.get_parameter("1.weight"), augmented.get_parameter("1.weight"))


def test_unknown_augment_names_the_key() -> None:
    with pytest.raises(ValueError, match="'augment' = 'jitter'"):
        make_augment("jitter", torch.zeros(3))


def test_normalization_of_black_is_minus_mean_over_std() -> None:
    n = Normalization("imagenet", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    black = n(np.zeros((1, 3, 2, 2), np.uint8))[0, :, 0, 0]
    np.testing.assert_allclose(n.of_black().numpy(), black, rtol=1e-6)


def test_config_choices_match_the_implemented_ones() -> None:
    import dataclasses

    from fedapp.core.config import RunConfig
    from fedapp.data.augment import AUGMENTS
    from fedapp.data.preprocess import NORMALIZES

    fields = {f.name: f.metadata["check"] for f in dataclasses.fields(RunConfig)}
    assert all(fields["normalize"](n) is None for n in NORMALIZES) and fields["normalize"]("bogus") is not None
    assert all(fields["augment"](a) is None for a in AUGMENTS) and fields["augment"]("bogus") is not None
    assert str(fields["normalize"]("bogus")).count(",") + 1 == len(NORMALIZES)
    assert str(fields["augment"]("bogus")).count(",") + 1 == len(AUGMENTS)
