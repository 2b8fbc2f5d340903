"""The training loop: masked entries never move, under any optimizer; FedProx term."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedapp.core.train import TrainSettings, local_train, proximal_term


def tiny() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    x = torch.randn(64, 4)
    return model, x, torch.randint(0, 3, (64,))


@pytest.mark.parametrize(
    "settings",
    [
        TrainSettings(epochs=2, steps=0, batch_size=8, lr=0.1),
        TrainSettings(epochs=2, steps=0, batch_size=8, lr=0.1, momentum=0.9),
        TrainSettings(epochs=2, steps=0, batch_size=8, lr=0.1, momentum=0.9, weight_decay=0.1),
        TrainSettings(epochs=2, steps=0, batch_size=8, lr=0.01, optimizer="adam"),
    ],
    ids=["sgd", "momentum", "momentum+wd", "adam"],
)
def test_masked_entries_get_exactly_zero_update(settings: TrainSettings) -> None:
    model, x, y = tiny()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    masks = {n: (torch.rand(p.shape, generator=torch.Generator().manual_seed(3)) < 0.5) for n, p in model.named_parameters()}
    local_train(model, x, y, settings, torch.Generator().manual_seed(0), masks)
    for n, p in model.named_parameters():
        frozen = ~masks[n]
        assert torch.equal(p.detach()[frozen], before[n][frozen]), n
        assert not torch.equal(p.detach()[masks[n]], before[n][masks[n]]), n


def test_steps_mode_runs_exactly_that_many_batches() -> None:
    model, x, y = tiny()
    stats = local_train(model, x, y, TrainSettings(epochs=0, steps=13, batch_size=8, lr=0.1), torch.Generator().manual_seed(0))
    assert stats.steps == 13 and stats.num_examples == 64


def test_proximal_term_value_and_gradient() -> None:
    model, _, _ = tiny()
    anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    term = proximal_term(0.2, anchor)(model)
    n_params = sum(p.numel() for p in model.parameters())
    assert float(term.detach()) == pytest.approx(0.5 * 0.2 * n_params * 0.25, rel=1e-5)
    term.backward()
    for p in model.parameters():
        assert p.grad is not None
        torch.testing.assert_close(p.grad, torch.full_like(p, 0.2 * 0.5))


def test_training_is_deterministic_under_a_seed() -> None:
    runs = []
    for _ in range(2):
        model, x, y = tiny()
        local_train(model, x, y, TrainSettings(epochs=1, steps=0, batch_size=8, lr=0.1), torch.Generator().manual_seed(5))
        runs.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)
