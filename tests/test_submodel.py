"""Sub-model extraction (dropout baselines) and the FedSPU paper CNNs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from fedapp.core.masks import model_param_masks, neuron_layout
from fedapp.methods.fedspu import PERSONAL_MODEL
from fedapp.methods.submodel import extract_submodel, write_back
from fedapp.methods.tiers import RECORD, random_neurons
from fedapp.models import initial_model
from fedapp.models.fedspu_cnn import cifar_cnn, emnist_cnn, speech_cnn
from fedapp.models.mlp import mlp
from tests.test_fedspu import Federation, bits


def zero_dropped(model: nn.Module, neurons: list[np.ndarray]) -> nn.Module:
    """Reference: the full model with every dropped neuron's output forced to zero."""
    hooks = []
    for layer, m in zip(neuron_layout(model).hidden, neurons, strict=True):
        mod = model.get_submodule(layer.norm or layer.name)
        keep = torch.from_numpy(m).float()
        hooks.append(mod.register_forward_hook(lambda _m, _i, out, k=keep: out * k.view(1, -1, *([1] * (out.dim() - 2)))))
    return model


@pytest.mark.parametrize(
    ("build", "shape"),
    [
        (lambda: mlp(64, (16, 8), 10), (64,)),
        (lambda: emnist_cnn((1, 12, 12), 5), (1, 12, 12)),
        (lambda: cifar_cnn((3, 16, 16), 4), (3, 16, 16)),
    ],
)
def test_sub_model_computes_what_the_full_model_with_dropped_neurons_zeroed_does(build, shape) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    full = build()
    for mod in full.modules():  # non-trivial BN statistics so eval mode is tested too
        if isinstance(mod, nn.BatchNorm2d):
            assert mod.running_mean is not None and mod.running_var is not None
            mod.running_mean.uniform_(-1, 1), mod.running_var.uniform_(0.5, 2), mod.weight.data.uniform_(0.5, 2)
    neurons = random_neurons(neuron_layout(full).widths, 0.5, 3)
    sub, masks = extract_submodel(full, neurons)
    assert sum(p.numel() for p in sub.parameters()) == sum(int(masks[n].sum()) for n, _ in full.named_parameters())
    x = torch.randn(7, *shape)
    ref = zero_dropped(full, neurons)
    for mode in ("eval", "train"):
        getattr(sub, mode)(), getattr(ref, mode)()
        torch.testing.assert_close(sub(x), ref(x), rtol=1e-5, atol=1e-5)


def test_write_back_changes_exactly_the_sub_model_entries() -> None:
    torch.manual_seed(1)
    full = emnist_cnn((1, 8, 8), 3)
    before = {k: v.clone() for k, v in full.state_dict().items()}
    neurons = random_neurons(neuron_layout(full).widths, 0.4, 0)
    sub, masks = extract_submodel(full, neurons)
    with torch.no_grad():
        for p in sub.parameters():
            p.add_(1.0)
    write_back(full, sub, masks)
    for k, v in full.state_dict().items():
        if k.endswith("weight") or k.endswith("bias"):
            m = torch.from_numpy(masks[k])
            assert torch.equal(v[m], before[k][m] + 1.0) and torch.equal(v[~m], before[k][~m]), k


def test_paper_cnn_parameter_counts() -> None:
    def count(m: nn.Module) -> int:
        return sum(p.numel() for p in m.parameters())

    assert count(emnist_cnn((1, 28, 28), 62)) == 64_722
    assert count(cifar_cnn((3, 32, 32), 10)) == 134_902
    assert count(speech_cnn((1, 32, 32), 35)) == 26_285
    assert neuron_layout(cifar_cnn((3, 32, 32), 10)).widths == (6, 16, 120, 84)


def test_fedspu_on_a_conv_bn_net_freezes_channels_and_uploads_bn_under_the_mask(tmp_path: Path) -> None:
    fed = Federation(tmp_path, {"method": "fedspu", "model": "fedspu-emnist", "tiers": "0.5", "fraction-train": 0.5})
    rng = np.random.default_rng(3)
    personal = {k: (rng.normal(size=v.shape).astype(v.dtype) if v.dtype == np.float32 else v) for k, v in fed.w0.items()}
    for k in personal:
        if "running_var" in k:
            personal[k] = np.abs(personal[k]) + 0.5
    for pid in (0, 1):
        fed.store.save(pid, PERSONAL_MODEL, personal)
    sent, replies = fed.train_round(1)
    pid = int(sent[0].content["config"]["partition-id"])
    neurons = [np.unpackbits(sent[0].content[RECORD][n].numpy(), count=20).astype(bool) for n in ("0", "4")]
    active = model_param_masks(initial_model(fed.cfg), neurons)
    after = fed.store.load(pid, PERSONAL_MODEL)
    params = {n for n, _ in initial_model(fed.cfg).named_parameters()}
    for k, m in active.items():
        if k in params:
            assert np.array_equal(bits(after[k][~m]), bits(personal[k][~m])), k
    uploaded = {k: a.numpy() for k, a in replies[0].content["values"].items()}
    assert uploaded["1.running_mean"].size == uploaded["1.weight"].size == 10  # BN gamma and statistics of kept channels only
    assert "1.num_batches_tracked" not in uploaded


def test_zero_dimensional_tensors_keep_their_shape_on_the_wire() -> None:
    from fedapp.core import wire

    assert wire.from_record(wire.to_record({"n": np.array(3, np.int64)}))["n"].shape == ()
