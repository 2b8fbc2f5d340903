"""The batched client kernel against B sequential ``local_train`` calls (CPU).

Tolerance: float32 weights and buffers within 1e-6 absolute + 1e-5 relative, mean
train loss within 1e-6 (the vectorised kernels sum in another order; measured gaps are
~3e-7); steps and num-examples equal; masked entries bit-identical to their start.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from fedapp.batched.plan import chunks, client_batches, step_grid
from fedapp.batched.train import ClientOutcome, ClientWork, train_clients, unbatchable
from fedapp.core.runtime import configure_threads
from fedapp.core.train import Augment, TrainSettings, TrainStats, local_train, proximal_term
from fedapp.data.augment import make_augment
from fedapp.models.cnn import cnn
from fedapp.models.cnn_bn import cnn_bn

configure_threads(1)  # as every entry point does; 2 threads on a loaded 2-core box are far slower

SIZES = (37, 64, 5, 100, 33, 32, 70, 12)  # B = 8 clients, batch 8: short last minibatches, 1..13 steps per epoch
CLASSES = 5
ATOL, RTOL = 1e-6, 1e-5

SETTINGS = {
    "sgd": TrainSettings(epochs=2, steps=0, batch_size=8, lr=0.1),
    "momentum+wd": TrainSettings(epochs=2, steps=0, batch_size=8, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adam+wd": TrainSettings(epochs=2, steps=0, batch_size=8, lr=0.01, optimizer="adam", weight_decay=0.01),
}


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, CLASSES))


def client_data(shape: tuple[int, ...], sizes: tuple[int, ...] = SIZES) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(n, *shape, generator=g), torch.randint(0, CLASSES, (n,), generator=g)) for n in sizes]


def random_masks(model: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.rand(p.shape, generator=g) < 0.6 for n, p in model.named_parameters()}


def gen(i: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + i)


def works_of(
    data: list[tuple[torch.Tensor, torch.Tensor]],
    masks: list[dict[str, torch.Tensor] | None] | None = None,
    prox_masked: bool = False,
    starts: list[dict[str, torch.Tensor]] | None = None,
    augment: Augment | None = None,
) -> list[ClientWork]:
    """One client's local run each, with a fresh generator (a run consumes it)."""
    works = []
    for i, (x, y) in enumerate(data):
        gm = masks[i] if masks else None
        works.append(ClientWork(x, y, gen(i), starts[i] if starts else None, gm, gm if prox_masked else None, augment))
    return works


def sequential(
    model: nn.Module, works: list[ClientWork], settings: TrainSettings, mu: float = 0.0
) -> list[tuple[dict[str, torch.Tensor], TrainStats]]:
    """What the engine does today: one local_train per client, on a fresh copy of ``model``."""
    out = []
    for w in works:
        m = copy.deepcopy(model)
        if w.state is not None:
            m.load_state_dict(w.state)
        extra = proximal_term(mu, {n: p.detach().clone() for n, p in m.named_parameters()}, w.prox_masks) if mu > 0 else None
        stats = local_train(m, w.x, w.y, settings, w.gen, w.grad_masks, extra, w.augment)
        out.append(({k: v.detach().clone() for k, v in m.state_dict().items()}, stats))
    return out


def compare(
    model: nn.Module,
    data: list[tuple[torch.Tensor, torch.Tensor]],
    settings: TrainSettings,
    mu: float = 0.0,
    client_batch: int | None = None,
    **case: Any,
) -> list[ClientOutcome]:
    """Batched equals sequential for these clients; the batched outcomes."""
    got = train_clients(copy.deepcopy(model), works_of(data, **case), settings, "cpu", client_batch, prox_mu=mu)
    assert_same(sequential(model, works_of(data, **case), settings, mu), got)
    return got


def assert_same(seq: list[tuple[dict[str, torch.Tensor], TrainStats]], got: list[ClientOutcome]) -> None:
    assert len(seq) == len(got)
    for i, ((state, stats), outcome) in enumerate(zip(seq, got, strict=True)):
        assert list(outcome.state) == list(state), i
        for k, v in state.items():
            torch.testing.assert_close(outcome.state[k], v, atol=ATOL, rtol=RTOL, msg=f"client {i} {k}")
        assert outcome.stats.steps == stats.steps and outcome.stats.num_examples == stats.num_examples, i
        assert outcome.stats.loss == pytest.approx(stats.loss, abs=1e-6), i


@pytest.mark.parametrize("name", list(SETTINGS))
def test_batched_equals_sequential(name: str) -> None:
    model, data = mlp(), client_data((12,))
    got = compare(model, data, SETTINGS[name])
    assert not torch.equal(got[0].state["1.weight"], model.state_dict()["1.weight"])  # training moved the weights


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("prox_masked", [False, True], ids=["prox", "prox-masked"])
def test_fedprox_term(name: str, prox_masked: bool) -> None:
    model, data = mlp(), client_data((12,))
    masks: list[dict[str, torch.Tensor] | None] = [random_masks(model, i) for i in range(len(data))]
    compare(model, data, SETTINGS[name], mu=0.5, masks=masks, prox_masked=prox_masked)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_grad_masks_exact_zero_update(name: str) -> None:
    model, data = mlp(), client_data((12,))
    masks: list[dict[str, torch.Tensor] | None] = [random_masks(model, i) for i in range(len(data))]
    masks[3] = None  # a client without masks in the same batch
    got = compare(model, data, SETTINGS[name], masks=masks)
    start = model.state_dict()
    for i, m in enumerate(masks):
        for n, keep in (m or {}).items():
            assert torch.equal(got[i].state[n][~keep], start[n][~keep]), (i, n)  # bit-identical
            assert not torch.equal(got[i].state[n][keep], start[n][keep]), (i, n)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_one_clients_mask_never_reaches_another(name: str) -> None:
    """Client 0 may change nothing, client 1 only its first layer, the rest everything:
    a kernel that mixed masks across the batch dimension fails one of these."""
    model, data = mlp(), client_data((12,))
    start = model.state_dict()
    zero = {n: torch.zeros(p.shape, dtype=torch.bool) for n, p in model.named_parameters()}
    first = {n: torch.full(p.shape, n.startswith("1."), dtype=torch.bool) for n, p in model.named_parameters()}
    masks = [zero, first, *[None] * (len(data) - 2)]
    got = train_clients(model, works_of(data, masks), SETTINGS[name], "cpu", prox_mu=0.5)
    for k, v in start.items():
        assert torch.equal(got[0].state[k], v), k
        assert torch.equal(got[1].state[k], v) != k.startswith("1."), k
        assert all(not torch.equal(o.state[k], v) for o in got[2:]), k


@pytest.mark.parametrize("name", list(SETTINGS))
def test_frozen_parameters(name: str) -> None:
    """requires_grad=False (FedPart's other groups) stays put; the rest trains as local_train does."""
    model, data = mlp(), client_data((12,))
    for n, p in model.named_parameters():
        p.requires_grad_(n.startswith("3."))
    got = compare(model, data, SETTINGS[name], mu=0.5)
    for k, v in model.state_dict().items():
        assert torch.equal(got[5].state[k], v) != k.startswith("3."), k


def test_clients_start_from_their_own_weights() -> None:
    """Personal methods: every client brings its own start state."""
    model, data = mlp(), client_data((12,))
    starts = [mlp(50 + i).state_dict() for i in range(len(data))]
    compare(model, data, SETTINGS["momentum+wd"], starts=starts)


def test_chunks_of_three_and_steps_mode() -> None:
    """client-batch 3 (chunks with fewer no-op steps) and local-steps runs equal sequential too."""
    model, data = mlp(), client_data((12,))
    s = TrainSettings(epochs=0, steps=11, batch_size=8, lr=0.05, momentum=0.9)
    compare(model, data, s, client_batch=3)


def test_cnn_with_augmentation() -> None:
    """The project's CNN on small images, each client's crop/flip drawn from its own generator."""
    torch.manual_seed(0)
    model, data = cnn((3, 8, 8), CLASSES), client_data((3, 8, 8), SIZES[:4])
    augment = make_augment("crop-flip", torch.tensor([-1.0, -0.5, 0.0]))
    s = TrainSettings(epochs=1, steps=0, batch_size=8, lr=0.05, momentum=0.9)
    compare(model, data, s, augment=augment)


def test_batchnorm_running_statistics_per_client() -> None:
    """BatchNorm in train mode: batch statistics and running buffers per client; clients
    of different minibatch sizes go to different chunks, equal sizes share one."""
    torch.manual_seed(0)
    model, data = cnn_bn((1, 8, 8), CLASSES), client_data((1, 8, 8), (16, 16, 21, 16, 9))
    s = TrainSettings(epochs=1, steps=0, batch_size=8, lr=0.05, momentum=0.9)
    got = compare(model, data, s)
    assert not torch.equal(got[0].state["1.running_mean"], got[1].state["1.running_mean"])
    plans = [client_batches(x.shape[0], s, gen(i)) for i, (x, _) in enumerate(data)]
    assert sorted(chunks(plans, 8, exact_sizes=True)) == [[0, 1, 3], [2], [4]]


def test_grid_pads_short_minibatches_and_idle_steps() -> None:
    s = TrainSettings(epochs=1, steps=0, batch_size=4, lr=0.1)
    plans = [client_batches(n, s, gen(i)) for i, n in enumerate((6, 3))]
    grid = step_grid(plans, [6, 3], torch.float32, torch.device("cpu"))
    assert grid.steps == [2, 1] and grid.widths == [4, 2] and grid.all_active == [True, False] and grid.padded
    assert grid.weights[0].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert grid.weights[1, :, :2].tolist() == [[1, 1], [1, 1]]  # the idle client's no-op step has weights, never NaN
    assert grid.active.tolist() == [[True, True], [True, False]]
    assert set(grid.rows[0, 1, :3].tolist()) == {6, 7, 8}  # client 1's rows follow client 0's six


def test_unbatchable_models_say_why() -> None:
    dropout = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2))
    assert "1 (Dropout)" in str(unbatchable(dropout))
    with pytest.raises(ValueError, match="Dropout"):
        train_clients(dropout, [ClientWork(torch.randn(4, 4), torch.zeros(4, dtype=torch.long), gen(0))], SETTINGS["sgd"], "cpu")
    assert unbatchable(cnn_bn((1, 8, 8), 3)) is None and unbatchable(mlp()) is None
    with pytest.raises(ValueError, match="no training samples"):
        client_batches(0, SETTINGS["sgd"], gen(0))
