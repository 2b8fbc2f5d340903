"""The pieces that keep CPU results bit-identical on the device path, and the NVML index match."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Array

from fedapp.client import cache
from fedapp.core import wire
from fedapp.core.config import RunConfig
from fedapp.core.train import bernoulli, loss_accumulator
from fedapp.data import client_data, dataset_for, on_device
from fedapp.data.dataset import Normalization
from fedapp.energy.auto import MeterSettings, open_sensors
from fedapp.energy.gpu_index import match_index, parse_bus_id
from fedapp.methods.fedselect import grad_select, top_k, top_k_mask
from fedapp.models import build_model


def test_device_loss_sum_has_the_bits_of_a_python_float_sum() -> None:
    losses = torch.rand(500, generator=torch.Generator().manual_seed(0)) * 3
    py = 0.0
    acc = loss_accumulator(torch.device("cpu"))
    for v in losses:
        py += float(v)
        acc += v
    assert float(acc) == py  # exact, not approximate
    assert float(losses.to(torch.float32).sum()) != py  # a float32 sum would not be


def test_bernoulli_from_uniforms_equals_torch_bernoulli() -> None:
    p = torch.rand(5000, generator=torch.Generator().manual_seed(1))
    p[:7], p[7:14] = 0.0, 1.0
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(bernoulli(p, g1), torch.bernoulli(p, generator=g2))
    assert torch.equal(g1.get_state(), g2.get_state())  # the same draws were used up


@pytest.mark.parametrize("stats", [((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), ((0.5,) * 3, (0.5,) * 3), ((0.0,) * 3, (1.0,) * 3)])
def test_torch_normalisation_has_the_bits_of_the_numpy_one(stats: tuple[tuple[float, ...], tuple[float, ...]]) -> None:
    norm = Normalization("x", *stats)
    x = np.random.default_rng(0).integers(0, 256, (40, 3, 16, 16), dtype=np.uint8)
    assert np.array_equal(norm(x).view(np.uint32), norm.tensor(torch.from_numpy(x)).numpy().view(np.uint32))


def test_top_k_mask_equals_numpy_top_k_with_ties() -> None:
    rng = np.random.default_rng(2)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        score = rng.integers(0, 5, n).astype(np.float32)  # many ties
        eligible = rng.random(n) < 0.7
        idx = np.flatnonzero(eligible)
        if idx.size == 0:
            continue
        k = int(rng.integers(1, idx.size + 1))
        want = np.zeros(n, bool)
        want[idx[top_k(score[idx], k)]] = True
        got = top_k_mask(torch.from_numpy(score), torch.from_numpy(eligible), k).numpy()
        assert np.array_equal(got, want)


def test_grad_select_takes_device_deltas() -> None:
    delta = np.array([0.5, -3.0, 2.0, 0.0, 2.0, 0.1], np.float32)
    m = {"w": np.array([False, False, False, True, False, False])}
    on_host = grad_select({"w": delta}, m, 0.4, 1.0)
    on_tensor = grad_select({"w": torch.from_numpy(delta)}, m, 0.4, 1.0)
    assert np.flatnonzero(on_host["w"]).tolist() == np.flatnonzero(on_tensor["w"]).tolist() == [1, 2, 3]  # |-3|, then the first 2.0


@pytest.mark.parametrize(
    "arr",
    [np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.array(7, np.int64), np.zeros((0, 3), np.float64), np.packbits([1, 0, 1, 1])],
)
def test_view_array_equals_flowers_numpy(arr: np.ndarray) -> None:
    a = Array(arr)
    got = wire.view_array(a)
    assert got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(got, a.numpy())
    assert not got.flags.writeable  # a view of the message bytes: nobody may write into it


@pytest.mark.parametrize(
    "arr", [np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.array(7, np.int64), np.ones(5, bool), np.arange(4, dtype=">i4")]
)
def test_npy_array_writes_the_bytes_np_save_writes(arr: np.ndarray) -> None:
    a, b = Array(arr), wire.npy_array(arr)
    assert (a.data, a.dtype, a.shape, a.stype) == (b.data, b.dtype, b.shape, b.stype)  # same message, same byte counts
    assert wire.from_record(wire.to_record({"x": arr}))["x"].flags.writeable  # decoded arrays stay writable


def test_view_array_leaves_anything_unusual_to_np_load() -> None:
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    assert np.array_equal(wire.view_array(Array(fortran)), fortran)
    lying = Array(np.arange(6, dtype=np.float32))
    lying.shape = (3,)  # metadata that does not match the npy header: np.load's answer, not a view
    assert wire.view_array(lying).shape == (6,)


def test_the_process_model_is_reset_to_a_fresh_build() -> None:
    cfg = RunConfig(model="cnn-bn", dataset="digits", seed=3)
    ds = dataset_for(cfg)
    cache.clear_caches()
    pm = cache.process_model(cfg, ds, torch.device("cpu"))
    fresh = build_model(cfg, ds.in_shape, ds.num_classes, seed=3)
    after_build = torch.default_generator.get_state()
    for p in pm.model.parameters():  # what a FedPart round leaves behind
        p.requires_grad_(False)
        p.grad = torch.ones_like(p)
    pm.model.eval()
    torch.rand(5)  # something drew from the default generator
    again = cache.process_model(cfg, ds, torch.device("cpu"))
    assert again.model is pm.model  # one model per process, not rebuilt
    assert torch.equal(torch.default_generator.get_state(), after_build)
    assert all(p.requires_grad and p.grad is None for p in again.model.parameters()) and again.model.training
    assert all(np.array_equal(again.initial[k], v.numpy()) for k, v in fresh.state_dict().items())
    cache.clear_caches()


def test_batched_host_transfers_equal_per_tensor_copies() -> None:
    from fedapp.core.device import host_arrays, load_host_arrays

    model = build_model(RunConfig(model="cnn-bn"), (1, 8, 8), 10, seed=1)  # float weights and int64 BN counters
    state = model.state_dict()
    batched = host_arrays(state, batched=True)
    assert list(batched) == list(state)
    for k, v in state.items():
        assert batched[k].dtype == v.numpy().dtype and np.array_equal(batched[k], v.numpy())
    other = build_model(RunConfig(model="cnn-bn"), (1, 8, 8), 10, seed=2)
    load_host_arrays(other, batched, batched=True)
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), state.values(), strict=True))
    with pytest.raises(RuntimeError, match="Missing key"):
        load_host_arrays(other, {k: v for k, v in batched.items() if k != "0.weight"}, batched=True)


def test_client_data_cache_is_bounded_and_equal_to_client_data(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = RunConfig(dataset="digits", partition="iid", num_clients=10)
    on_device.clear()
    one = on_device.client_tensors(cfg, 0, torch.device("cpu"))
    assert np.array_equal(one.x_train.numpy(), client_data(cfg, 0).x_train)
    assert on_device.client_tensors(cfg, 0, torch.device("cpu")) is one  # kept across rounds
    monkeypatch.setattr(on_device, "CACHE_BYTES", 3 * one.nbytes)
    for pid in range(10):
        on_device.client_tensors(cfg, pid, torch.device("cpu"))
    assert sum(v.nbytes for v in on_device._cache.values()) <= 3 * one.nbytes
    assert len(on_device._cache) <= 3
    on_device.clear()


def test_global_record_is_decoded_once_per_shared_record() -> None:
    from flwr.app import ArrayRecord

    record = ArrayRecord({"w": Array(np.ones(3, np.float32))})
    first = cache.global_arrays(record)
    assert cache.global_arrays(record) is first
    assert cache.global_arrays(ArrayRecord({"w": Array(np.ones(3, np.float32))})) is not first


# -- which GPU NVML meters ---------------------------------------------------------------------

GPUS = [("GPU-aaaa1111-0000", (0, 0x1B, 0)), ("GPU-bbbb2222-0000", (0, 0x3B, 0)), ("GPU-cccc3333-0000", (0, 0x5E, 0))]


def test_nvml_index_by_uuid_then_pci_then_visible_devices() -> None:
    assert match_index("bbbb2222-0000", None, 0, "1", GPUS) == 1  # torch's UUID has no "GPU-" prefix
    assert match_index("", (0, 0x5E, 0), 0, "2", GPUS) == 2
    assert match_index("", None, 1, "2,0", GPUS) == 0  # Ray gave this actor GPUs 2 and 0; cuda:1 is NVML's 0
    assert match_index("", None, 0, "GPU-cccc", GPUS) == 2  # CUDA accepts UUID prefixes
    assert match_index("", None, 1, None, GPUS) == 1  # nothing renumbers: the same index
    assert match_index("", None, 1, "2", GPUS) is None  # only one GPU visible
    assert parse_bus_id("00000000:3B:00.0") == (0, 0x3B, 0)


def test_auto_meter_leaves_the_gpu_out_when_training_on_the_cpu(tmp_path: Path) -> None:
    s = MeterSettings(meter="auto", sysfs_root=str(tmp_path), tegrastats=str(tmp_path / "none"), trains_on="cpu")
    sensors, text = open_sensors(s)
    assert sensors == [] and "nvml: not used, training runs on cpu" in text
