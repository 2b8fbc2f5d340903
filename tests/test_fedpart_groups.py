"""FedPart layer groups and analytic accounting against the spec's tables (fedpart.md §1.1, §1.4)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedapp.core.masks import layer_groups
from fedapp.core.runtime import configure_threads
from fedapp.methods.accounting import group_macs, group_sizes
from fedapp.models.cnn_bn import cnn_bn
from fedapp.models.resnet import resnet8, resnet18

configure_threads(1)

# Spec §1.1 table (ResNet-8 on CIFAR-10); the fc group changes with the class count.
RESNET8_SIZES = [9536, 36992, 36992, 73984, 147712, 8448, 295424, 590336, 33280]
# By hand: conv1 1*16*9 + BN 2*16; 16*16*9 + 32; 16*32*9 + 64; 32*32*9 + 64; 32*64*9 + 128; fc 64*10 + 10.
CNN_BN_SIZES = [176, 2336, 4672, 9280, 18560, 650]


def assert_partition(model: nn.Module) -> None:
    """Every parameter in exactly one group; no buffer in any group."""
    flat = [p for g in layer_groups(model) for p in g.params]
    assert len(flat) == len(set(flat))
    assert set(flat) == {n for n, _ in model.named_parameters()}
    assert not set(flat) & {n for n, _ in model.named_buffers()}


@pytest.mark.parametrize(("classes", "fc", "total"), [(10, 2570, 1_235_274), (100, 25_700, 1_258_404), (200, 51_400, None)])
def test_resnet8_groups_match_spec_table(classes: int, fc: int, total: int | None) -> None:
    model = resnet8((3, 32, 32), classes)
    assert_partition(model)
    groups = layer_groups(model)
    assert len(groups) == 10
    assert group_sizes(model, groups) == [*RESNET8_SIZES, fc]
    if total is not None:
        assert sum(p.numel() for p in model.parameters()) == total
    # downsample is its own group, right after conv2 of its block
    assert [g.name for g in groups][4:7] == ["layer2.0.conv2", "layer2.0.downsample.0", "layer3.0.conv1"]
    assert groups[0].params == ("conv1.weight", "bn1.weight", "bn1.bias")


def test_resnet18_has_21_groups_in_spec_order() -> None:
    model = resnet18((3, 32, 32), 10)
    assert_partition(model)
    names = [g.name for g in layer_groups(model)]
    expected = ["conv1"] + [f"layer1.{b}.conv{c}" for b in (0, 1) for c in (1, 2)]
    for s in (2, 3, 4):
        expected += [f"layer{s}.0.conv1", f"layer{s}.0.conv2", f"layer{s}.0.downsample.0", f"layer{s}.1.conv1", f"layer{s}.1.conv2"]
    assert names == [*expected, "fc"]
    assert len(names) == 21
    assert sum(p.numel() for p in model.parameters()) == 11_181_642


def test_resnet18_on_grey_images_keeps_group_order() -> None:
    model = resnet18((1, 32, 32), 10)
    assert_partition(model)
    assert [g.name for g in layer_groups(model)][:2] == ["conv1", "layer1.0.conv1"]
    assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 10)


def test_digits_cnn_has_six_groups() -> None:
    model = cnn_bn((1, 8, 8), 10)
    assert_partition(model)
    assert group_sizes(model, layer_groups(model)) == CNN_BN_SIZES
    assert model(torch.zeros(3, 1, 8, 8)).shape == (3, 10)


def test_forward_macs_match_hand_counts() -> None:
    # ResNet-8 at 32x32 (spec §1.4: 14.47M): stem 16*16*64*147; stage0 2 x 8*8*64*576;
    # stage1 4*4*128*576, 4*4*128*1152, ds 4*4*128*64; stage2 2*2*256*1152, 2*2*256*2304, ds 2*2*256*128; fc 2560.
    r8 = resnet8((3, 32, 32), 10)
    want = [2_408_448, 2_359_296, 2_359_296, 1_179_648, 2_359_296, 131_072, 1_179_648, 2_359_296, 131_072, 2_560]
    assert group_macs(r8, (3, 32, 32), layer_groups(r8)) == want
    assert sum(want) == 14_469_632
    # digits CNN at 8x8: 8*8*16*9, 8*8*16*144, 4*4*32*144, 4*4*32*288, 2*2*64*288, 64*10
    cnn = cnn_bn((1, 8, 8), 10)
    assert group_macs(cnn, (1, 8, 8), layer_groups(cnn)) == [9216, 147_456, 73_728, 147_456, 73_728, 640]
