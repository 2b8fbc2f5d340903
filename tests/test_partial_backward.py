"""FedSPU's structured partial backward (fedapp/core/partial_backward.py): frozen neurons'
gradients are not computed, and the trained model is bit for bit the masked backward's."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fedapp.core import partial_backward as pb
from fedapp.core import train
from fedapp.core.masks import model_param_masks, neuron_layout
from fedapp.core.partial_backward import partial_backward, plan
from fedapp.core.train import TrainSettings, local_train
from fedapp.methods.base import ClientPolicy
from fedapp.methods.fedspu import FedSPUClient
from fedapp.methods.tiers import random_neurons
from fedapp.models.cnn import cnn
from fedapp.models.cnn_bn import cnn_bn
from fedapp.models.fedspu_cnn import cifar_cnn, emnist_cnn
from fedapp.models.mlp import mlp
from fedapp.sim.run_local import run_local
from tests.run_rows import outcome_rows

MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], int]] = {
    "fedspu-emnist 1x28x28": (lambda: emnist_cnn((1, 28, 28), 62), (1, 28, 28), 62),
    "fedspu-cifar10 3x32x32": (lambda: cifar_cnn((3, 32, 32), 10), (3, 32, 32), 10),
    "cnn 1x8x8": (lambda: cnn((1, 8, 8), 10), (1, 8, 8), 10),
    "cnn-bn 1x8x8": (lambda: cnn_bn((1, 8, 8), 10), (1, 8, 8), 10),
}
OPTIMIZERS = {
    "sgd": {},
    "sgd momentum decay": {"momentum": 0.9, "weight_decay": 1e-3},
    "adam decay": {"optimizer": "adam", "weight_decay": 1e-4},
}


def trained(name: str, p: float, partial: bool, opt: dict[str, Any], seed: int = 3) -> dict[str, torch.Tensor]:
    build, shape, classes = MODELS[name]
    torch.manual_seed(seed)
    model = build()
    x, y = torch.randn(40, *shape), torch.randint(0, classes, (40,))  # 40 = 2 full batches + one of 8
    params = dict(model.named_parameters())
    neurons = random_neurons(neuron_layout(model).widths, p, seed)
    masks = {k: torch.from_numpy(m) for k, m in model_param_masks(model, neurons).items() if k in params}
    settings = TrainSettings(epochs=2, steps=0, batch_size=16, lr=0.05, partial_backward=partial, **opt)
    local_train(model, x, y, settings, torch.Generator().manual_seed(seed), masks)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k].numpy().reshape(-1).view(np.uint8), b[k].numpy().reshape(-1).view(np.uint8)), k


@pytest.mark.parametrize("opt", OPTIMIZERS.values(), ids=OPTIMIZERS.keys())
@pytest.mark.parametrize("p", [0.2, 0.6])
@pytest.mark.parametrize("name", MODELS)
def test_partial_backward_trains_the_masked_backwards_model_bit_for_bit(name: str, p: float, opt: dict[str, Any]) -> None:
    assert_same_bits(trained(name, p, True, opt), trained(name, p, False, opt))


def first_grads(
    model: nn.Module, masks: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, partial: bool
) -> dict[str, torch.Tensor]:
    """The gradients of one minibatch; partial: after a first backward of the same shapes, which
    checks the sliced kernels against autograd's (and returns autograd's)."""
    for _ in range(2 if partial else 1):
        model.zero_grad(set_to_none=True)
        with partial_backward(model, masks) if partial else contextlib.nullcontext(True) as used:
            assert used
            nn.functional.cross_entropy(model(x), y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture
def one_thread() -> Iterator[None]:
    """The slices give autograd's bits for these shapes on one thread (on two, oneDNN splits some
    differently: the verdicts then keep autograd's backward, which the bit-identity test covers)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def first_block_norms(model: nn.Module) -> set[str]:
    """The BatchNorm layers between the first conv and the next weight layer."""
    names = [n for n, _ in model.named_children()]
    start = next(i for i, m in enumerate(model.children()) if isinstance(m, nn.Conv2d))
    out = set()
    for n, m in zip(names[start + 1 :], list(model.children())[start + 1 :], strict=True):
        if isinstance(m, (nn.Conv2d, nn.Linear, nn.Flatten)):
            break
        if isinstance(m, nn.BatchNorm2d):
            out.add(n)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_frozen_gradients_are_not_computed_and_active_ones_are_autograds(name: str, one_thread: None) -> None:
    """Before masking: every conv weight and bias gradient of a frozen entry, and the first block's
    BatchNorm ones, are exact zeros (never computed; autograd's are not), every active one is
    autograd's; the rest (Linear layers, later BatchNorms) is autograd's whole."""
    build, shape, classes = MODELS[name]
    torch.manual_seed(0)
    model = build()
    x, y = torch.randn(16, *shape), torch.randint(0, classes, (16,))
    masks = {k: torch.from_numpy(m) for k, m in model_param_masks(model, random_neurons(neuron_layout(model).widths, 0.4, 5)).items()}
    full, part = first_grads(model, masks, x, y, False), first_grads(model, masks, x, y, True)
    skipping = {n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)} | first_block_norms(model)
    skipped = 0
    for k, g in part.items():
        active = masks[k]
        assert torch.equal(g[active], full[k][active]), k
        if k.rsplit(".", 1)[0] in skipping:
            assert torch.count_nonzero(g[~active]) == 0, k
            skipped += int(torch.count_nonzero(full[k][~active]))
        else:
            assert torch.equal(g, full[k]), k
    assert skipped > 0


def test_a_hand_computed_two_conv_net(one_thread: None) -> None:
    """1x1 convs on one pixel x = 2, neuron 1 of conv 1 and neuron 0 of conv 2 active:
    h = relu(W1 x) = [6, 4], out = W2 h = [14, -4], logits = W3 out = [-14, 10]. With
    d = softmax(logits) - onehot(0): dL/dout = W3^T d, dL/dW2[0, 1] = dL/dout[0] * h[1],
    dL/dW1[1] = (W2^T dL/dout)[1] * x: the frozen neuron 1 of conv 2 still carries its gradient
    back to the active neuron 1 of conv 1. Every frozen weight's gradient is an exact zero."""
    conv1, conv2, out = nn.Conv2d(1, 2, 1, bias=False), nn.Conv2d(2, 2, 1, bias=False), nn.Linear(2, 2, bias=False)
    model = nn.Sequential(conv1, nn.ReLU(), conv2, nn.Flatten(), out)
    w1, w2, w3 = torch.tensor([3.0, 2.0]), torch.tensor([[1.0, 2.0], [-1.0, 0.5]]), torch.tensor([[-1.0, 0.0], [1.0, 1.0]])
    with torch.no_grad():
        conv1.weight.copy_(w1.view(2, 1, 1, 1))
        conv2.weight.copy_(w2.view(2, 2, 1, 1))
        out.weight.copy_(w3)
    d = torch.softmax(torch.tensor([-14.0, 10.0]), 0) - torch.tensor([1.0, 0.0])
    d_out = w3.t() @ d
    masks = model_param_masks(model, [np.array([False, True]), np.array([True, False])])
    grads = first_grads(model, {k: torch.tensor(m) for k, m in masks.items()}, torch.full((1, 1, 1, 1), 2.0), torch.tensor([0]), True)
    g2, g1 = grads["2.weight"].view(2, 2), grads["0.weight"].view(2)
    assert g2[0, 1].item() == pytest.approx(float(d_out[0] * 4.0), rel=1e-6)
    assert g1[1].item() == pytest.approx(float((w2.t() @ d_out)[1] * 2.0), rel=1e-6)
    assert g2[0, 0] == 0 and g2[1, 0] == 0 and g2[1, 1] == 0 and g1[0] == 0
    assert torch.allclose(grads["4.weight"], torch.outer(d, torch.tensor([14.0, -4.0])), rtol=1e-6, atol=0)  # Linear: autograd's, whole


def test_plan_falls_back_where_nothing_is_structured() -> None:
    torch.manual_seed(0)
    net = mlp(8, (6, 4), 3)  # Linear only: autograd's backward
    masks = {k: torch.from_numpy(m) for k, m in model_param_masks(net, random_neurons(neuron_layout(net).widths, 0.5, 1)).items()}
    assert plan(net, masks) is None
    conv = emnist_cnn((1, 8, 8), 10)
    conv_masks = {k: torch.from_numpy(m) for k, m in model_param_masks(conv, random_neurons(neuron_layout(conv).widths, 1.0, 1)).items()}
    assert plan(conv, conv_masks) is None  # p = 1: nothing frozen
    coords = {k: torch.rand(v.shape) < 0.5 for k, v in conv.named_parameters()}  # coordinate masks (FedSelect-like)
    assert plan(conv, coords) is None
    with partial_backward(
        conv, {k: torch.from_numpy(m) for k, m in model_param_masks(conv, random_neurons((20, 20), 0.2, 1)).items()}
    ) as used:
        assert used and "forward" in vars(conv)
    assert "forward" not in vars(conv)  # the model is left as it was


def test_fedspu_clients_use_it_and_a_run_is_the_masked_runs_bit_for_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two rounds of FedSPU on digits with the paper's EMNIST CNN (8x8 inputs), every tier:
    metrics and model equal those of the masked backward."""
    common = {
        "method": "fedspu", "dataset": "digits", "model": "fedspu-emnist", "num-clients": 5, "fraction-train": 1.0,
        "num-server-rounds": 2, "local-epochs": 1, "batch-size": 16, "lr": 0.05, "momentum": 0.9, "weight-decay": 0.001,
    }  # fmt: skip
    used: list[bool] = []
    real = train.partial_backward

    @contextlib.contextmanager
    def recorded(model: nn.Module, masks: dict[str, torch.Tensor]) -> Iterator[bool]:
        with real(model, masks) as on:
            used.append(on)
            yield on

    monkeypatch.setattr(train, "partial_backward", recorded)
    runs = {"partial": run_local({**common, "run-dir": str(tmp_path / "a")})}
    assert used.count(True) == 2 * 4 and len(used) == 2 * 5  # the p < 1 clients of both rounds; p = 1 has nothing frozen
    monkeypatch.setattr(FedSPUClient, "train_settings", ClientPolicy.train_settings)
    runs["masked"] = run_local({**common, "run-dir": str(tmp_path / "b")})  # same length: same message sizes
    assert len(used) == 2 * 5
    assert outcome_rows(runs["partial"]) == outcome_rows(runs["masked"])
    a, b = np.load(runs["partial"] / "model.npz"), np.load(runs["masked"] / "model.npz")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        assert np.array_equal(a[k].reshape(-1).view(np.uint8), b[k].reshape(-1).view(np.uint8)), k


def test_a_shape_whose_slices_differ_keeps_autograds_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sliced kernels that do not give autograd's bits (here made so: every sliced weight gradient
    scaled by 1.001) are caught by the first backward of each shape, which then stays autograd's."""
    real = pb._weight_grads
    monkeypatch.setattr(pb, "_weight_grads", lambda *a: [None if t is None else t * 1.001 for t in real(*a)])
    monkeypatch.setattr(pb, "VERDICTS", {})
    assert_same_bits(trained("fedspu-emnist 1x28x28", 0.4, True, {}), trained("fedspu-emnist 1x28x28", 0.4, False, {}))
    assert pb.VERDICTS and not any(pb.VERDICTS.values())
