"""``client-batch = auto``'s memory estimate: against the peak a chunk really allocates on the
CPU (torch.profiler's memory events, bench/client_batch_memory.py), by hand on a tiny model,
and sized on the node's own device with free memory read again each round."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedapp.batched.memory import ClientMemory
from fedapp.core.config import ConfigError
from fedapp.engine.batched_executor import BatchedExecutor
from fedapp.engine.client_batch_size import AUTO_MAX, AutoSize, auto_client_batch, client_bytes
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.sim.run_local import full_config
from tests.chunk_memory import BASE, CASES, config, estimate, measure


@pytest.mark.parametrize(("case", "k"), [("cnn", 2), ("cnn", 4), ("mlp-fedprox-adam", 8), ("fedselect-mlp", 4), ("fedpews-mlp-warmup", 4)])
def test_the_estimate_is_within_a_quarter_of_the_measured_peak(case: str, k: int) -> None:
    raw = config(case)
    est, got = estimate(raw, k), measure(raw, k)
    assert 0.75 * got <= est <= 1.25 * got, f"{case}, k={k}: estimate {est} B, measured peak {got} B"


def test_each_client_adds_its_lane_and_kernel_bytes() -> None:
    """Linear(2, 3) + ReLU, minibatch 4, 10 training samples, no test samples, momentum (1 slot):
    weights 9 floats = 36 B; a sample 2 floats + an int64 label = 16 B; 3 steps of 4 grid entries
    (int64 row + float weight = 12 B). Lane: model 36 + data 160. Kernel: stacked weights 36,
    momentum 36, data 160, grid 144; per step gradients 36, outputs 2 x (12 + 12) floats, minibatch 64."""
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    lane, kernel, step = 36 + 160, 36 + 36 + 160 + 144, 36 + 2 * 24 * 4 + 64
    assert client_bytes(model, (2,), 4, 10, 1, False) == lane + kernel + step
    # FedProx: its anchor in the lane and the kernel's stacked anchor; 5 test samples; FedSelect's two mask sets
    # (1 B per weight each) and the kernel's stacked masks (bool + float: 5 B per weight)
    assert client_bytes(model, (2,), 4, 10, 1, True, test_samples=5, masks=2) == lane + kernel + step + 2 * 36 + 5 * 16 + 9 * (2 + 5)
    # 7 steps (local-steps, or more epochs) instead of one epoch's 3: 4 more rows of the step grid
    assert client_bytes(model, (2,), 4, 10, 1, False, steps=7) == lane + kernel + step + 4 * 4 * 12
    # a FedPeWS warm-up: its loop's anchor in the lane, the weight pass's parameter masks and masked weights
    assert client_bytes(model, (2,), 4, 10, 1, False, warmup=True) == lane + kernel + step + 3 * 36
    # with 3 hidden neurons (Linear(2, 3) + ReLU + Linear(3, 2): 17 weights, 68 B): the same three
    # copies, and the two uniforms per hidden neuron and step drawn before the loop (3 steps, float32)
    hidden = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
    added = client_bytes(hidden, (2,), 4, 10, 1, False, warmup=True) - client_bytes(hidden, (2,), 4, 10, 1, False)
    assert added == 3 * 68 + 2 * 3 * 3 * 4


def test_on_cuda_a_convolution_adds_cudnns_workspace() -> None:
    """Conv2d(1, 2, 3, padding=1) on 1 x 4 x 4 inputs, minibatch 2: its unfolded input is 1 x 9 values
    for each of 16 output positions and 2 samples, float32; twice that is cuDNN's workspace. A
    model without convolutions adds none."""
    conv = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1))
    assert client_bytes(conv, (1, 4, 4), 2, 4, 0, False, cuda=True) - client_bytes(conv, (1, 4, 4), 2, 4, 0, False) == 2 * 9 * 16 * 2 * 4
    linear = nn.Sequential(nn.Linear(2, 3))
    assert client_bytes(linear, (2,), 4, 10, 0, False, cuda=True) == client_bytes(linear, (2,), 4, 10, 0, False)


def test_a_view_allocates_no_activation() -> None:
    flat = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    assert client_bytes(flat, (2, 2), 4, 4, 0, False) - client_bytes(nn.Sequential(nn.Linear(4, 3)), (4,), 4, 4, 0, False) == 0


def test_the_node_devices_decides() -> None:
    """A run-config asking for CUDA on a machine without one, a node that trains on the CPU: sized for
    the CPU (a conv model: 1 per chunk), never touching CUDA."""
    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    raw = full_config({"dataset": "digits", "model": "cnn", "device": "cuda", "energy-meter": "none"})
    assert auto_client_batch(raw, {"device": "cpu"}) == (1, 8)
    with pytest.raises(ConfigError, match="sees no CUDA device"):  # the run-config's device, as before
        auto_client_batch(raw)


def test_free_memory_is_read_again_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CUDA here: the driver's and the caching allocator's readings are replaced, the sizing rule is the real one."""
    free = [10_000_000]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda _device=None: (free[0], 2 * free[0]))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda _device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda _device=None: 0)
    size = AutoSize(torch.device("cuda"), (8, 8), per_client=100_000)
    executor = BatchedExecutor(lambda m: m, {}, None, sizes=[size])
    assert executor.size() == 50  # half of 10 MB in 100 kB clients
    free[0] = 3_000_000  # an earlier round's lanes and cached data hold the rest
    assert executor.size() == 15
    free[0] = 10**12
    assert executor.size() == AUTO_MAX
    assert executor.auto_min == 1
    free[0] = 3_000_000  # torch's caching allocator holds 4 MB, of which 1 MB in use: 3 MB more it can hand out
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda _device=None: 4_000_000)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda _device=None: 1_000_000)
    assert executor.size() == 30


@pytest.mark.parametrize(
    ("overrides", "memory"),
    [
        ({"method": "fedavg"}, ClientMemory()),
        ({"method": "fedprox"}, ClientMemory(anchor=True)),
        ({"method": "fedselect"}, ClientMemory(mask_sets=2)),
        ({"method": "fedspu"}, ClientMemory(mask_sets=1)),
        ({"method": "fedpews"}, ClientMemory(warmup=True)),
        ({"method": "fedpews", "base": "fedprox"}, ClientMemory(anchor=True, warmup=True)),
        ({"method": "fedpews-fixed", "base": "fedprox"}, ClientMemory(anchor=True)),
        ({"method": "fjord"}, ClientMemory()),
    ],
)
def test_each_method_declares_what_its_client_holds_in_a_chunk(overrides: dict[str, str], memory: ClientMemory) -> None:
    """What the lanes of tests/chunk_memory.py hold: FedProx's anchor (also as FedPeWS's base), FedSelect's
    personal and shared gradient masks, FedSPU's active-neuron masks, a FedPeWS warm-up's passes."""
    cfg, method, params = resolve(full_config({**BASE, **overrides}))
    assert method.client(cfg, params).chunk_memory() == memory


def test_a_methods_mask_sets_reach_the_estimate() -> None:
    """FedSelect against FedPer (same personal split, model and steps): each of k clients adds two
    bool masks per weight in its lane (2 B) and the kernel's stacked bool mask and float copy (5 B)."""
    k = 3
    model = build_model(resolve(config("fedselect-mlp"))[0], (64,), 10)
    elements = sum(p.numel() for p in model.parameters())
    fedper = full_config({**BASE, **CASES["fedselect-mlp"], "method": "fedper"})
    assert estimate(config("fedselect-mlp"), k) - estimate(fedper, k) == k * elements * (2 + 5)
