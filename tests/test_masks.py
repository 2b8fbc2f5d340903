"""Neuron masks -> parameter masks, and layer groups, on the paper's models."""

from __future__ import annotations

import numpy as np
from torch import nn

from fedapp.config import RunConfig
from fedapp.masks import layer_groups, model_param_masks, neuron_layout
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
