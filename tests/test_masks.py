"""Neuron masks -> parameter masks, and layer groups, on the paper's models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedapp.core.config import RunConfig
from fedapp.core.masks import layer_groups, model_param_masks, neuron_layout, shape_masks, torch_param_masks
from fedapp.models import build_model


def fc_net() -> nn.Module:
    return build_model(RunConfig(model="mlp", mlp_hidden="32,64,128,32"), (5,), 4, seed=0)


def paper_cnn() -> nn.Module:
    return build_model(RunConfig(model="cnn"), (3, 32, 32), 20, seed=0)


def test_paper_models_have_the_spec_sizes() -> None:
    assert sum(p.numel() for p in fc_net().parameters()) == 14_884
    assert neuron_layout(fc_net()).total == 256
    assert sum(p.numel() for p in paper_cnn().parameters()) == 134_228
    assert neuron_layout(paper_cnn()).total == 224


def test_linear_masks_are_outer_products_and_logits_stay_on() -> None:
    model = fc_net()
    layout = neuron_layout(model)
    rng = np.random.default_rng(1)
    neurons = [rng.random(w) < 0.5 for w in layout.widths]
    masks = model_param_masks(model, neurons)
    np.testing.assert_array_equal(masks["1.weight"], np.outer(neurons[0], np.ones(5, bool)))  # input never masked
    np.testing.assert_array_equal(masks["3.weight"], np.outer(neurons[1], neurons[0]))
    np.testing.assert_array_equal(masks["3.bias"], neurons[1])
    np.testing.assert_array_equal(masks["9.weight"], np.outer(np.ones(4, bool), neurons[3]))  # logits never masked
    assert masks["9.bias"].all()


def test_conv_to_linear_flatten_expands_each_channel_over_its_pixels() -> None:
    model = paper_cnn()
    layout = neuron_layout(model)
    neurons = [np.zeros(w, bool) for w in layout.widths]
    for n in neurons:
        n[::3] = True
    masks = model_param_masks(model, neurons)
    conv2 = masks["3.weight"]
    assert conv2.shape == (64, 32, 3, 3)
    np.testing.assert_array_equal(conv2[:, :, 1, 2], np.outer(neurons[1], neurons[0]))
    fc = masks["10.weight"]  # Linear(2048, 20): channel c owns features [16c, 16c + 16)
    np.testing.assert_array_equal(fc[0], np.repeat(neurons[2], 16))
    assert neurons[2][0] and fc[5, :16].all() and not fc[5, 16:32].any()


def test_layer_groups_cover_every_parameter_once_and_attach_batchnorm() -> None:
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    groups = layer_groups(model)
    assert [g.params for g in groups] == [("0.weight", "0.bias", "1.weight", "1.bias"), ("4.weight", "4.bias")]
    names = [p for g in groups for p in g.params]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())


# -- small hand-built nets: every mask below is written out by hand -------------------------------


def bn_net() -> nn.Module:
    """Linear(4,3) + BN(3), Linear(3,2, no bias), Linear(2,2): hidden widths 3 and 2."""
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2, bias=False), nn.Linear(2, 2))


def test_layout_reads_widths_norms_and_biases_and_splits_a_neuron_vector() -> None:
    layout = neuron_layout(bn_net())
    assert [(w.name, w.out_width, w.in_width, w.norm, w.has_bias) for w in layout.layers] == [
        ("0", 3, 4, "1", True), ("3", 2, 3, None, False), ("4", 2, 2, None, True),
    ]  # fmt: skip
    assert layout.hidden_names == ["0", "3"] and layout.widths == (3, 2) and layout.total == 5
    a, b = layout.split(np.arange(5))
    assert a.tolist() == [0, 1, 2] and b.tolist() == [3, 4]
    with pytest.raises(ValueError, match=r"shape \(4,\), expected \(5,\)"):
        layout.split(np.arange(4))


def test_param_masks_by_hand_with_batchnorm_no_bias_and_rows_extent() -> None:
    layout = neuron_layout(bn_net())
    n0, n1 = np.array([True, False, True]), np.array([False, True])
    outer = layout.param_masks([n0, n1])
    bn = ["1.bias", "1.running_mean", "1.running_var", "1.weight"]
    assert sorted(outer) == ["0.bias", "0.weight", *bn, "3.weight", "4.bias", "4.weight"]
    assert outer["0.weight"].tolist() == [[True] * 4, [False] * 4, [True] * 4]
    for k in ("0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var"):
        assert outer[k].tolist() == [True, False, True], k
    assert outer["3.weight"].tolist() == [[False, False, False], [True, False, True]]
    assert outer["4.weight"].tolist() == [[False, True], [False, True]] and outer["4.bias"].tolist() == [True, True]
    rows = layout.param_masks([n0, n1], extent="rows")  # incoming weights of kept neurons only
    assert rows["3.weight"].tolist() == [[False, False, False], [True, True, True]]
    assert rows["4.weight"].tolist() == [[True, True], [True, True]]
    with pytest.raises(ValueError, match="got 1 neuron masks for 2 hidden layers"):
        layout.param_masks([n0])
    with pytest.raises(ValueError, match=r"mask for 3 has shape \(3,\), expected \(2,\)"):
        layout.param_masks([n0, n0])


def test_neuron_masks_pack_to_bits_and_unpack_checked() -> None:
    layout = neuron_layout(nn.Sequential(nn.Linear(2, 10), nn.Linear(10, 3), nn.Linear(3, 1)))
    n0, n1 = np.array([1, 0, 0, 1, 1, 0, 0, 0, 1, 1], bool), np.array([0, 1, 1], bool)
    packed = layout.pack_neurons([n0, n1])
    assert {k: v.tolist() for k, v in packed.items()} == {"0": [0b10011000, 0b11000000], "1": [0b01100000]}
    back = layout.unpack_neurons(packed)
    assert back[0].tolist() == n0.tolist() and back[1].tolist() == n1.tolist() and back[0].dtype == bool
    with pytest.raises(ValueError, match=r"'peer mask' names layers \['0'\], model has hidden layers \['0', '1'\]"):
        layout.unpack_neurons({"0": packed["0"]}, "peer mask")
    with pytest.raises(ValueError, match=r"0: expected 2 packed bytes, got uint8 \(1,\)"):
        layout.unpack_neurons({"0": packed["0"][:1], "1": packed["1"]})
    with pytest.raises(ValueError, match=r"1: expected 1 packed bytes, got int64 \(1,\)"):
        layout.unpack_neurons({"0": packed["0"], "1": packed["1"].astype(np.int64)})


def test_models_without_hidden_neurons_or_not_feed_forward_are_refused() -> None:
    with pytest.raises(ValueError, match="Linear has fewer than two Linear/Conv2d layers"):
        neuron_layout(nn.Linear(3, 2))
    with pytest.raises(ValueError, match="Sequential is not a plain feed-forward net: 1 takes 5 inputs, not a multiple of 0's 3 outputs"):
        neuron_layout(nn.Sequential(nn.Linear(2, 3), nn.Linear(5, 1)))
    assert neuron_layout(nn.Sequential(nn.Linear(2, 3), nn.Linear(6, 1))).total == 3  # a multiple: flatten-like


def test_torch_masks_equal_the_numpy_masks_and_carry_gradients() -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 2 * 2, 3), nn.Linear(3, 2))
    layout = neuron_layout(model)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    n0, n1 = np.array([False, True]), np.array([True, False, True])
    for extent in ("outer", "rows"):
        want = model_param_masks(model, [n0, n1], extent)
        soft = [torch.tensor(n, dtype=torch.float32, requires_grad=True) for n in (n0, n1)]
        got = torch_param_masks(layout, soft, shapes, extent)
        assert sorted(got) == ["0.bias", "0.weight", "1.bias", "1.weight", "3.bias", "3.weight", "4.bias", "4.weight"]  # no BN buffers
        for k, m in got.items():
            assert tuple(m.shape) == shapes[k], k
            np.testing.assert_array_equal(m.detach().numpy().astype(bool), want[k], err_msg=f"{extent} {k}")
        torch.stack([m.sum() for m in got.values()]).sum().backward()
        # d/dn0[c]: conv weight 1*3*3 + conv bias + BN weight + BN bias = 12, plus (outer) Linear(8,3) columns of
        # channel c, 4 features x n1.sum() = 2 kept rows = 8
        assert soft[0].grad is not None and soft[0].grad.tolist() == ([20.0, 20.0] if extent == "outer" else [12.0, 12.0])
        # d/dn1[j]: Linear(8,3) row (8 inputs, times n0 under outer: 4) + bias, plus (outer) Linear(3,2) column (2 rows)
        assert soft[1].grad is not None and soft[1].grad.tolist() == ([4.0 + 1 + 2] * 3 if extent == "outer" else [9.0] * 3)


def test_shape_masks_broadcast_2d_masks_over_conv_kernels_only() -> None:
    m = np.array([[True, False], [False, True]])
    out = shape_masks({"conv": m, "fc": m, "v": np.array([True, False, True, True])}, {"conv": (2, 2, 3, 1), "fc": (2, 2), "v": (2, 2)})
    assert out["conv"].shape == (2, 2, 3, 1) and out["conv"][:, :, 2, 0].tolist() == m.tolist() and out["conv"].flags.c_contiguous
    assert out["fc"].tolist() == m.tolist()
    assert out["v"].tolist() == [[True, False], [True, True]]


def test_layer_groups_root_parameters_leading_norms_and_layer_and_group_norm() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))
            self.body = nn.Sequential(nn.LayerNorm(3), nn.Linear(3, 3), nn.GroupNorm(1, 3), nn.Linear(3, 2, bias=False))

    assert [(g.name, g.params) for g in layer_groups(Scaled())] == [
        ("", ("scale", "body.0.weight", "body.0.bias")),  # root's own parameter, named without a dot; LayerNorm joins it
        ("body.1", ("body.1.weight", "body.1.bias", "body.2.weight", "body.2.bias")),  # GroupNorm joins its Linear
        ("body.3", ("body.3.weight",)),
    ]
    first = layer_groups(nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 2)))  # a norm with nothing before it: its own group
    assert [(g.name, g.params) for g in first] == [("0", ("0.weight", "0.bias")), ("1", ("1.weight", "1.bias"))]


def test_torch_masks_keep_the_dtype_and_device_of_the_neuron_masks_even_with_one_hidden_layer() -> None:
    layout = neuron_layout(nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 4)))  # one hidden layer: one neuron mask
    shapes = {"0.weight": (2, 3), "0.bias": (2,), "1.weight": (4, 2), "1.bias": (4,)}
    for extent in ("outer", "rows"):
        for device in ("cpu", "meta"):  # meta: a device other than the CPU default, without a GPU
            got = torch_param_masks(layout, [torch.ones(2, dtype=torch.bfloat16, device=device)], shapes, extent)
            assert {k: (m.dtype, m.device.type, tuple(m.shape)) for k, m in got.items()} == {
                k: (torch.bfloat16, device, s) for k, s in shapes.items()
            }, (extent, device)


def test_param_masks_are_boolean_and_pack_neurons_needs_one_mask_per_hidden_layer() -> None:
    layout = neuron_layout(nn.Sequential(nn.Linear(2, 8), nn.Linear(8, 2), nn.Linear(2, 5), nn.Linear(5, 1)))  # widths 8, 2, 5
    a, b, c = layout.split(np.arange(15))
    assert a.tolist() == list(range(8)) and b.tolist() == [8, 9] and c.tolist() == [10, 11, 12, 13, 14]
    neurons = [np.arange(8) % 2, np.array([1, 0]), np.array([0, 1, 1, 0, 1])]  # ints: read as booleans
    for extent in ("outer", "rows"):
        masks = layout.param_masks(neurons, extent)
        assert {m.dtype for m in masks.values()} == {np.dtype(bool)}, extent
    outer = layout.param_masks(neurons)
    assert outer["3.weight"].tolist() == [[False, True, True, False, True]] and outer["3.bias"].tolist() == [True]
    with pytest.raises(ValueError, match="zip"):
        layout.pack_neurons(neurons[:2])
    packed = layout.pack_neurons(neurons)
    assert packed["0"].tolist() == [0b01010101]  # 8 neurons: one byte
    with pytest.raises(ValueError, match=r"0: expected 1 packed bytes, got uint8 \(2,\)"):
        layout.unpack_neurons({**packed, "0": np.zeros(2, np.uint8)})
    with pytest.raises(ValueError, match=r"^'neuron mask' names layers"):
        layout.unpack_neurons({"0": packed["0"]})
