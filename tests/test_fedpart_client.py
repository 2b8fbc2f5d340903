"""FedPart client half: freezing, real backward savings, local BatchNorm statistics, FedProx base."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedapp.core.device import host_arrays
from fedapp.core.masks import layer_groups
from fedapp.core.runtime import configure_threads
from fedapp.data import client_data, dataset_for
from fedapp.methods.base import ClientJob
from fedapp.methods.fedpart import BN_STATE, FedPartClient
from fedapp.methods.layer_schedule import FULL
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.sim.run_local import full_config
from tests.memory_store import MemoryStore

configure_threads(1)  # as every entry point does; 2 threads on a loaded 2-core box are ~20x slower

BASE = {
    "method": "fedpart", "dataset": "digits", "model": "cnn-bn", "partition": "iid", "num-clients": 4,
    "optimizer": "adam", "lr": 0.01, "batch-size": 16, "local-steps": 3,
}  # fmt: skip


def make_job(group: int, store: MemoryStore, server_round: int = 1, **overrides: object) -> ClientJob:
    cfg, _, params = resolve(full_config({**BASE, **overrides}))
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=0)  # the "global" model every round
    received = {k: np.ones(v.shape, bool) for k, v in model.state_dict().items()}
    data = client_data(cfg, 0)
    gen = torch.Generator().manual_seed(server_round)
    return ClientJob(
        cfg, params, 0, server_round, {"group-index": group}, {}, model, host_arrays(model.state_dict()), received, data, store, gen
    )


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("group", [0, 2, 5])
def test_frozen_groups_are_bit_identical_and_only_the_group_is_uploaded(group: int) -> None:
    job = make_job(group, MemoryStore())
    before = snapshot(job.model)
    selected = set(layer_groups(job.model)[group].params)
    result = FedPartClient(job.cfg, job.params).train(job)
    assert result.upload == selected
    assert result.metrics["group-index"] == group and result.metrics["steps"] == 3
    for n, p in job.model.named_parameters():
        if n in selected:
            assert not torch.equal(p, before[n]), n
        else:
            assert torch.equal(p, before[n]), n
            assert not p.requires_grad and p.grad is None


def test_backward_stops_at_the_trained_group() -> None:
    """Layers below the trained group build no autograd graph: their outputs need no gradient."""
    job = make_job(3, MemoryStore())
    needs_grad: dict[str, bool] = {}
    convs = [(n, m) for n, m in job.model.named_modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    for n, m in convs:
        m.register_forward_hook(lambda _m, _i, out, n=n: needs_grad.__setitem__(n, out.requires_grad))
    FedPartClient(job.cfg, job.params).train(job)
    assert [needs_grad[n] for n, _ in convs] == [False, False, False, True, True, True]


def test_full_round_trains_everything_but_uploads_no_buffers() -> None:
    job = make_job(FULL, MemoryStore())
    before = snapshot(job.model)
    result = FedPartClient(job.cfg, job.params).train(job)
    assert result.upload == set(before)
    assert all(not torch.equal(p, before[n]) for n, p in job.model.named_parameters())
    assert result.records == {}  # partition 0 reports BN statistics only when the server asks


def test_batchnorm_statistics_stay_local_across_rounds() -> None:
    store = MemoryStore()
    job1 = make_job(1, store)
    FedPartClient(job1.cfg, job1.params).train(job1)
    saved = store.load(0, BN_STATE)
    assert set(saved) == {n for n, _ in job1.model.named_buffers()}
    assert int(saved["1.num_batches_tracked"]) == 3  # all BN layers, frozen ones included, update their statistics
    # next round the client starts from the server's copies (the fresh model) but must use its own
    job2 = make_job(4, store, server_round=2)
    fresh_mean = job2.model.state_dict()["1.running_mean"].clone()
    assert not torch.equal(torch.from_numpy(saved["1.running_mean"]), fresh_mean)
    job2.config["send-bn-stats"] = True
    result = FedPartClient(job2.cfg, job2.params).train(job2)
    assert int(store.load(0, BN_STATE)["1.num_batches_tracked"]) == 6
    assert set(result.records["bn-stats"]) == set(saved)
    assert not (result.upload or set()) & set(saved)


def test_fedprox_base_pulls_the_group_back_and_leaves_frozen_groups_alone() -> None:
    moved = {}
    for mu in (0.0, 100.0):
        prox: dict[str, object] = {"base": "fedprox", "proximal-mu": mu, "optimizer": "sgd", "lr": 0.005, "local-steps": 10}
        job = make_job(4, MemoryStore(), 1, **prox)
        before = snapshot(job.model)
        FedPartClient(job.cfg, job.params).train(job)
        after = dict(job.model.named_parameters())
        selected = set(layer_groups(job.model)[4].params)
        assert all(torch.equal(after[n], before[n]) for n in before if n not in selected)
        moved[mu] = sum(float((after[n] - before[n]).detach().norm() ** 2) for n in selected) ** 0.5
    assert moved[100.0] < 0.5 * moved[0.0]


def test_group_index_out_of_range_is_rejected() -> None:
    job = make_job(6, MemoryStore())
    with pytest.raises(ValueError, match=r"group-index 6 is outside -1..5"):
        FedPartClient(job.cfg, job.params).train(job)
