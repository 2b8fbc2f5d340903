"""No host work inside the batched kernels' step loops (CPU).

A ``TorchFunctionMode`` records every call that draws from a generator, reads the device
(``item``, ``tolist``, ``cpu``, ``numpy``, ``bool(t)``, data-dependent shapes) or makes a host
tensor or copy (``torch.tensor``, ``pin_memory``, ``Tensor.to`` with a device, even a no-op one
on CPU) from the loop's first vmapped call to the kernel's return. With the chunk's draws made
up front, that is the one read of the chunk's losses whatever the number of steps; a per-step
draw or copy would grow with it. The up-front augmentation is also checked against each
client's own ``Pipeline`` call per minibatch (what ``local_train`` does), bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import fedapp.batched.train as train_kernel
import fedapp.methods.pews_kernel as pews_kernel
from fedapp.batched.plan import client_batches
from fedapp.batched.train import ClientWork, train_clients
from fedapp.batched.upfront import augment_draws, check_augments
from fedapp.core.masks import neuron_layout
from fedapp.core.runtime import configure_threads
from fedapp.core.train import TrainSettings
from fedapp.data.augment import make_augment
from fedapp.methods.pews_kernel import WarmupCall, train_warmups
from fedapp.methods.pews_train import WarmupLoop
from fedapp.models.cnn import cnn

configure_threads(1)

HOST = {
    *("item", "tolist", "cpu", "numpy", "pin_memory", "tensor", "as_tensor", "from_numpy"),
    *("__bool__", "__int__", "__float__", "__index__", "nonzero", "masked_select", "unique"),
    *("rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli", "multinomial"),
    *("normal", "uniform_", "normal_", "bernoulli_", "random_", "exponential_"),
}
BLACK = torch.tensor([-1.0, -0.5, 0.25])
SIZES = (19, 8, 30, 5)  # short last minibatches and one client with fewer steps than the rest


def names_a_device(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return "device" in kwargs or "non_blocking" in kwargs or any(isinstance(a, torch.device | str | int | torch.Tensor) for a in args[1:])


class HostCalls(TorchFunctionMode):
    """Host-side calls made while ``on``, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.on, self.calls = False, list[str]()

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if self.on and (name in HOST or "generator" in kwargs or (name == "to" and names_a_device(args, kwargs))):
            self.calls.append(name)
        return func(*args, **kwargs)


@contextmanager
def loop_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[HostCalls]:
    """Record host calls from the first call of a vmapped function (the step loop's first step)."""
    mode = HostCalls()
    real = torch.func.vmap

    def vmap(fn: Callable[..., Any], *a: Any, **k: Any) -> Callable[..., Any]:
        batched = real(fn, *a, **k)

        def call(*args: Any, **kwargs: Any) -> Any:
            mode.on = True
            return batched(*args, **kwargs)

        return call

    monkeypatch.setattr(train_kernel, "vmap", vmap)
    monkeypatch.setattr(pews_kernel, "vmap", vmap)
    with mode:
        yield mode


def client_data(sizes: tuple[int, ...] = SIZES) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(n, 3, 10, 10, generator=g), torch.randint(0, 4, (n,), generator=g)) for n in sizes]


def train_calls(steps: int, augments: list[Any], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    torch.manual_seed(0)
    model = cnn((3, 10, 10), 4)
    settings = TrainSettings(epochs=0, steps=steps, batch_size=8, lr=0.05, momentum=0.9)
    works = [ClientWork(x, y, torch.Generator().manual_seed(i), augment=augments[i]) for i, (x, y) in enumerate(client_data())]
    with loop_calls(monkeypatch) as mode:
        train_clients(model, works, settings, "cpu")
    return mode.calls


AUGMENTED: dict[str, list[Any]] = {
    "crop-flip": [make_augment("crop-flip", BLACK)] * 4,
    "flip-rotate-crop, crop-flip and none": [
        make_augment("flip-rotate-crop", BLACK),
        None,
        make_augment("crop-flip", -BLACK),
        make_augment("crop-flip", BLACK),
    ],
    "none": [None] * 4,
}


@pytest.mark.parametrize("augments", AUGMENTED.values(), ids=AUGMENTED.keys())
def test_the_training_step_loop_reads_the_host_once_per_chunk(augments: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """2 steps or 6 (5 clients' minibatches of 8 in step mode): the loop's only host call is
    the chunk's one read of its losses."""
    assert train_calls(2, augments, monkeypatch) == ["tolist"]
    assert train_calls(6, augments, monkeypatch) == ["tolist"]


def warmup_calls(epochs: int, shared: bool, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4))
    layout = neuron_layout(model)
    settings = TrainSettings(epochs=epochs, steps=0, batch_size=8, lr=0.1)
    g = torch.Generator().manual_seed(5)
    works = []
    for i, n in enumerate(SIZES):
        x, y = torch.randn(n, 12, generator=g), torch.randint(0, 4, (n,), generator=g)
        loop = WarmupLoop(copy.deepcopy(model), layout, settings)
        pews = {"ref": None, "weight": 0.0, "lr": 0.5, "shared": shared}
        works.append(WarmupCall(loop, x, y, torch.zeros(layout.total), pews, torch.Generator().manual_seed(i)))
    with loop_calls(monkeypatch) as mode:
        train_warmups(works)
    return mode.calls


@pytest.mark.parametrize("shared", [False, True])
def test_the_warmup_step_loop_reads_the_host_once_per_chunk(shared: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """One epoch (up to 4 steps) or three (up to 12): every score and weight draw is made
    before the loop, which reads the host only for the chunk's losses."""
    assert warmup_calls(1, shared, monkeypatch) == ["tolist"]
    assert warmup_calls(3, shared, monkeypatch) == ["tolist"]


def test_the_chunk_augmentation_is_each_clients_own_call_bit_for_bit() -> None:
    """Per step, the whole chunk's augmented minibatch equals each client augmenting its own rows
    with its own generator (padding and idle rows zero), and every generator ends in the same state."""
    augments = AUGMENTED["flip-rotate-crop, crop-flip and none"]
    data = client_data()
    x = torch.cat([d[0] for d in data])
    settings = TrainSettings(epochs=2, steps=0, batch_size=8, lr=0.1)
    gens = [torch.Generator().manual_seed(10 + i) for i in range(len(data))]
    plans = [client_batches(int(d[0].shape[0]), settings, g) for d, g in zip(data, gens, strict=True)]
    own_gens = [copy.deepcopy(g) for g in gens]
    chunk = augment_draws(augments, gens, plans, torch.device("cpu"))
    starts = [0, *torch.tensor(SIZES).cumsum(0).tolist()[:-1]]
    width = max(int(b.numel()) for p in plans for b in p)
    for t in range(max(len(p) for p in plans)):
        want = torch.zeros(len(data), width, *x.shape[1:])
        rows = torch.zeros(len(data), width, dtype=torch.int64)
        for i, (aug, plan) in enumerate(zip(augments, plans, strict=True)):
            if t < len(plan):
                own = x[plan[t] + starts[i]]
                want[i, : len(plan[t])] = own if aug is None else aug(own, own_gens[i])
                rows[i, : len(plan[t])] = plan[t] + starts[i]
        assert torch.equal(chunk.apply(t, x[rows]), want), f"step {t}"
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(gens, own_gens, strict=True))


def test_an_augmentation_it_cannot_draw_up_front_is_refused_before_training() -> None:
    with pytest.raises(ValueError, match=r"is not a fedapp\.data\.augment\.Pipeline"):
        check_augments([None, lambda x, gen: x])
