"""FedSelect's client half on models with BatchNorm: merge, masks, uploads, state.

Jobs are built by hand around a small conv+BN net (and a torchvision ResNet-18), so
the policy runs on a real model with running statistics, as it does inside the
ClientApp (which builds models by name from the run-config).
"""

from __future__ import annotations

import numpy as np
import torch
import torchvision
from torch import nn

from fedapp.core.device import host_arrays, load_host_arrays
from fedapp.core.evaluate import evaluate
from fedapp.data import ClientData
from fedapp.methods.base import ClientJob
from fedapp.methods.fedselect import FedSelectClient
from fedapp.methods.personal import PersonalState
from fedapp.methods.registry import resolve
from fedapp.sim.run_local import full_config
from tests.memory_store import MemoryStore

BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def conv_bn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))


def data(n: int, shape: tuple[int, ...], classes: int, seed: int) -> ClientData:
    g = np.random.default_rng(seed)
    x = g.normal(size=(2 * n, *shape)).astype(np.float32)
    y = g.integers(0, classes, 2 * n).astype(np.int64)
    return ClientData(x[:n], y[:n], x[n:], y[n:])


def job_for(
    model: nn.Module, global_arrays: dict[str, np.ndarray], rnd: int, store: MemoryStore, d: ClientData, **overrides: object
) -> ClientJob:
    cfg, _, params = resolve(full_config({"method": "fedselect", "batch-size": 5, "personal-limit": 0.5, **overrides}))
    load_host_arrays(model, global_arrays)
    received = {k: np.ones(v.shape, bool) for k, v in global_arrays.items()}
    return ClientJob(
        cfg, params, 0, rnd, {}, {}, model, host_arrays(model.state_dict()), received, d, store, torch.Generator().manual_seed(rnd)
    )  # type: ignore[arg-type]


def perturbed(arrays: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    out = {k: (v + g.normal(size=v.shape).astype(v.dtype)) if v.dtype == np.float32 else v for k, v in arrays.items()}
    out["1.running_mean"] = np.full(4, 123.0, np.float32)  # a server-side value the client must ignore
    return out


def test_bn_buffers_stay_local_and_only_global_coordinates_are_merged_and_uploaded() -> None:
    store, d = MemoryStore(), data(20, (1, 8, 8), 3, 0)
    model = conv_bn()
    params = {n for n, _ in model.named_parameters()}
    g0 = host_arrays(model.state_dict())
    cfg, _, fs_params = resolve(full_config({"method": "fedselect", "personal-limit": 0.5}))
    policy = FedSelectClient(cfg, fs_params)

    r1 = policy.train(job_for(conv_bn(), g0, 1, store, d))
    assert r1.upload == params  # never running_mean / running_var / num_batches_tracked
    assert r1.masks is not None and all(m.all() for m in r1.masks.values())  # round 1: everything global
    s1 = PersonalState.load(job_for(conv_bn(), g0, 1, store, d))
    assert s1 is not None and not any(m.any() for m in s1.m_cur.values())
    grown = {n: m.mean() for n, m in s1.m_next.items()}
    assert 0 < grown["0.weight"] <= 0.5 and 0 < grown["4.weight"] <= 0.5
    assert s1.theta["1.num_batches_tracked"][()] > 0  # BN statistics moved during training

    # round 2: the merge uses round 1's (empty) mask, so every parameter takes the global value;
    # the BN buffers keep the client's own statistics, not the server's 123
    g1 = perturbed(g0, 1)
    job2 = job_for(conv_bn(), g1, 2, store, d)
    m_cur = policy.restore(job2)
    merged = host_arrays(job2.model.state_dict())
    for n in params:
        assert np.array_equal(merged[n], g1[n])
    for b in BUFFERS:
        assert np.array_equal(merged[f"1.{b}"], s1.theta[f"1.{b}"])
    assert all(np.array_equal(m_cur[n], s1.m_next[n]) for n in params)

    r2 = policy.train(job_for(conv_bn(), g1, 2, store, d))
    s2 = PersonalState.load(job2)
    assert s2 is not None and r2.masks is not None
    for n in params:
        assert np.array_equal(r2.masks[n], ~s2.m_cur[n])  # uploads exactly the global coordinates
        assert np.all(s2.m_next[n][s2.m_cur[n]])  # personal stays personal

    # round 3: global values land only on round 2's global coordinates
    g2 = perturbed(g1, 2)
    job3 = job_for(conv_bn(), g2, 3, store, d)
    policy.restore(job3)
    merged = host_arrays(job3.model.state_dict())
    for n in params:
        m = s2.m_cur[n]
        assert m.any() and (~m).any()
        assert np.array_equal(merged[n][~m], g2[n][~m])
        assert np.array_equal(merged[n][m], s2.theta[n][m])

    # evaluation uses the client's own model (personal values and BN statistics), not the global one
    job_eval = job_for(conv_bn(), g2, 2, store, d)
    got = policy.evaluate(job_eval)
    own = conv_bn()
    load_host_arrays(own, s2.theta)
    acc, loss = evaluate(own, torch.from_numpy(d.x_test), torch.from_numpy(d.y_test))
    assert (got["accuracy"], got["loss"]) == (acc, loss)


def test_resnet18_masks_respect_the_limit_per_tensor_and_skip_bn_buffers() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    g0 = host_arrays(model.state_dict())
    store, d = MemoryStore(), data(4, (3, 32, 32), 10, 1)
    overrides = {"batch-size": 4, "local-alt-epochs": 1, "personal-limit": 0.3}
    job = job_for(model, g0, 1, store, d, **overrides)
    result = FedSelectClient(job.cfg, job.params).train(job)
    params = {n for n, _ in model.named_parameters()}
    assert result.upload == params and not any(n.endswith(BUFFERS) for n in result.upload)
    state = PersonalState.load(job)
    assert state is not None
    for n, m in state.m_next.items():
        assert m.mean() <= 0.3
        if m.size >= 64:  # big enough that round(0.25 * n) > 0 and below the cap floor(0.3 n)
            assert m.sum() == round(0.25 * m.size), n
    assert state.theta["bn1.running_var"].shape == (64,)
