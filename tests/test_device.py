"""The ``device`` key, and every method's client path on the chosen device.

No GPU here, so "on the chosen device" is checked the way a CPU machine can check it for
real: every method runs end to end with ``device = "cpu"`` while torch's default device is
``meta``. A tensor of the training path (model, optimizer state, masks, scores, personal
state, data, augmentation) created without naming the chosen device lands on ``meta``,
and mixing it with the CPU tensors fails the client's reply; the run must have none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedapp.client import cache
from fedapp.core.config import ConfigError, RunConfig, parse
from fedapp.core.device import node_device, pick
from fedapp.data import on_device
from fedapp.methods.registry import MODULES, get_method
from fedapp.sim.run_local import run_local
from tests.data_files import write_cifar10

SHARD = {"dataset": "digits", "partition": "shard", "classes-per-client": 2, "samples-per-client": 20, "num-clients": 5}
BASE = {**SHARD, "num-server-rounds": 2, "batch-size": 8, "lr": 0.05, "momentum": 0.5, "device": "cpu"}
TIERS = {"tiers": "0.5,1.0", "model": "cnn"}
# what a method's run here needs beyond BASE (a method not named runs with BASE alone)
OWN: dict[str, dict[str, Any]] = {
    "fedavg": {"model": "cnn"},
    "fedprox": {"proximal-mu": 0.1},
    "fedpews": {"warmup-fraction": 0.5, "base": "fedprox"},
    "fedpews-fixed": {"warmup-fraction": 0.5},
    "fedselect": {"local-alt-epochs": 1, "personal-rate": 0.5},
    "fedbn": {"model": "cnn-bn"},  # its personal layers are BatchNorm's
    "fedspu": {"early-stopping": True, "mask-transport": "seed", **TIERS},
    "fjord": TIERS,
    "feddrop": TIERS,
    # FedPart on a BatchNorm CNN: one full round, then one round per layer group (6)
    "fedpart": {"model": "cnn-bn", "warmup-rounds": 1, "rounds-per-layer": 1, "cycles": 1,
                "full-rounds-between-cycles": 0, "num-server-rounds": 7},
}  # fmt: skip
# one run per registered method, and per branch of its client path that makes tensors of its own
METHODS: dict[str, dict[str, Any]] = {
    **{name: {"method": name, **OWN.get(name, {})} for name in MODULES},
    "fedpews-activation": {"method": "fedpews", "warmup-fraction": 1.0, "mask-impl": "activation", "mask-draw": "shared",
                           "diversity-ref": "probs"},
    "fedselect-random": {"method": "fedselect", "local-alt-epochs": 1, "personal-selection": "random"},
}  # fmt: skip


@pytest.fixture
def meta_default() -> Iterator[None]:
    """torch's default device is ``meta`` (caches emptied, so models and data are made anew under it)."""
    cache.clear_caches()
    on_device.clear()
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)
        cache.clear_caches()
        on_device.clear()


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_clean(run_dir: Path, rounds: int, method: str = "fedavg", clients: int = 5) -> None:
    """Every round trained (and, where the method evaluates personally, evaluated) with no failed client."""
    got = rows(run_dir)
    assert len(got) == rounds
    for r in got:
        assert r["failures"] == 0 and r["clients"] > 0, r["failure_reasons"]
        if get_method(method).server.personalized_eval:
            assert r["evaluated_clients"] == clients, r
        assert np.isfinite(r["accuracy"])
    with np.load(run_dir / "model.npz") as z:
        assert all(np.isfinite(z[k]).all() for k in z.files if z[k].dtype.kind == "f")


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_trains_only_on_the_chosen_device(tmp_path: Path, name: str, meta_default: None) -> None:
    cfg = {**BASE, **METHODS[name], "run-dir": str(tmp_path / name)}
    out = run_local(cfg)
    assert_clean(out, int(cfg["num-server-rounds"]), str(cfg.get("method", "fedavg")))
    devices = json.loads((out / "devices.json").read_text())
    assert devices == {"server": "cpu", "clients": {str(p): "cpu" for p in range(5)}}


def test_image_path_augmentation_and_normalisation_on_the_chosen_device(tmp_path: Path, meta_default: None) -> None:
    write_cifar10(tmp_path / "data", 12, 3, seed=1)
    cfg = {**BASE, "dataset": "cifar10", "data-root": str(tmp_path / "data"), "model": "cnn", "augment": "flip-rotate-crop"}
    out = run_local({**cfg, "num-server-rounds": 1, "run-dir": str(tmp_path / "run")})
    assert_clean(out, 1)


def test_a_tensor_made_off_the_chosen_device_fails_the_run(tmp_path: Path, meta_default: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a loss accumulator made without the device breaks every reply."""
    import fedapp.core.train

    monkeypatch.setattr(fedapp.core.train, "loss_accumulator", lambda device: torch.zeros((), dtype=torch.float64))
    out = run_local({**BASE, "run-dir": str(tmp_path / "broken")})
    got = rows(out)
    assert got and all(r["clients"] == 0 and r["failures"] == 5 for r in got)
    assert "meta" in got[0]["failure_reasons"][0]


# -- the key ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "CPU", "cuda0", ""])
def test_malformed_device_names_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"run-config key 'device' = .* expected auto, cpu, cuda, cuda:N"):
        parse(RunConfig, {"device": bad})


def test_auto_is_cpu_here_and_cpu_is_cpu() -> None:
    want = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert pick("auto").type == want
    assert pick("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("value", ["cuda", "cuda:0", "cuda:7"])
def test_cuda_on_a_machine_without_one_fails_before_training(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"run-config key 'device' = '{value}' is not allowed: torch .* sees no CUDA device"):
        pick(value)
    with pytest.raises(ConfigError, match="'device'"):
        run_local({**BASE, "device": value, "run-dir": str(tmp_path / "run")})
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_on_a_machine_without_one_fails() -> None:
    with pytest.raises(ConfigError, match="run-config key 'device' = 'mps' is not allowed: torch sees no Apple MPS device"):
        pick("mps")


def test_cuda_index_beyond_the_count_names_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"'device' = 'cuda:2' is not allowed: this process sees 2 CUDA device\(s\), cuda:0..cuda:1"):
        pick("cuda:2")
    assert pick("cuda:1") == torch.device("cuda", 1)


def test_node_config_device_wins_over_the_run_config() -> None:
    cfg = RunConfig(device="cuda:3")  # the run-config's choice is never consulted where the node has its own
    assert node_device(cfg, {"device": "cpu"}) == torch.device("cpu")
    with pytest.raises(ConfigError, match="node-config key 'device' = 'gpu' is not allowed"):
        node_device(RunConfig(), {"device": "gpu"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_node_without_its_device_stops_the_run_at_discovery(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"node 1001: node-config key 'device' = 'cuda' is not allowed"):
        run_local({**BASE, "run-dir": str(tmp_path / "run")}, node_configs=[{}, {"device": "cuda"}, {}, {}, {}])
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing written: the run never started
