"""FedPart end to end on the in-process engine (same ServerApp loop and ClientApp as `flwr run`):
the server changes only the round's group, BN statistics never reach it, upload bytes are the
group's parameter bytes plus the per-tensor record overhead, evaluation uses partition 0's statistics."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Message

from fedapp.core import wire
from fedapp.core.evaluate import evaluate
from fedapp.core.masks import layer_groups
from fedapp.core.state import ContextStore
from fedapp.data import dataset_for
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.fedpart import BN_STATE
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.server.loop import serve
from fedapp.sim.run_local import full_config

NPY_HEADER = 128  # numpy .npy v1 header of these small float32 tensors (Flower serialises Arrays as .npy)

TINY = {
    "method": "fedpart", "dataset": "digits", "model": "cnn-bn", "partition": "iid", "num-clients": 3,
    "optimizer": "adam", "lr": 0.001, "batch-size": 32, "local-steps": 2, "client-weighting": "uniform",
    "warmup-rounds": 1, "cycles": 1, "rounds-per-layer": 1, "full-rounds-between-cycles": 0, "num-server-rounds": 7,
}  # fmt: skip


class RecordingGrid(LocalGrid):
    """LocalGrid that keeps the global arrays of every train message it delivers."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sent: list[dict[str, np.ndarray]] = []

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        if messages and "arrays" in messages[0].content.array_records:
            self.sent.append(wire.from_record(messages[0].content["arrays"]))  # type: ignore[arg-type]
        return super().send_and_receive(messages, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RecordingGrid, dict[str, Any]]:
    from fedapp.client_app import app as client_app

    raw = full_config({**TINY, "run-dir": str(tmp_path_factory.mktemp("fedpart") / "run")})
    grid = RecordingGrid(client_app, raw, 3)
    return serve(grid, raw, discovery_timeout=5.0), grid, raw


def rows_of(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def structure(raw: dict[str, Any]) -> tuple[torch.nn.Module, list[list[str]]]:
    cfg = resolve(raw)[0]
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed)
    return model, [list(g.params) for g in layer_groups(model)]


def test_each_round_changes_exactly_its_group_and_never_the_bn_buffers(tiny_run: tuple[Path, RecordingGrid, dict[str, Any]]) -> None:
    run, grid, raw = tiny_run
    model, groups = structure(raw)
    rows = rows_of(run)
    assert [r["trained_group"] for r in rows] == [-1, 0, 1, 2, 3, 4, 5]
    assert [r["clients"] for r in rows] == [3] * 7 and all(r["coverage"] > 0 for r in rows)
    buffers = {n for n, _ in model.named_buffers()}
    initial = {k: v.numpy() for k, v in model.state_dict().items()}
    assert len(grid.sent) == 7
    for k in buffers:  # the server's BN copies never change: clients never upload them
        assert all(np.array_equal(s[k].reshape(initial[k].shape), initial[k]) for s in grid.sent)
    for t in range(1, 6):  # rounds 2..6 trained groups 0..4; round t+1 sends round t's aggregate
        changed = {k for k in grid.sent[t] if not np.array_equal(grid.sent[t][k], grid.sent[t + 1][k])}
        assert changed == set(groups[t - 1]), t


def test_upload_bytes_are_group_bytes_plus_bounded_record_overhead(tiny_run: tuple[Path, RecordingGrid, dict[str, Any]]) -> None:
    run, _, raw = tiny_run
    model, groups = structure(raw)
    sizes = {n: p.numel() for n, p in model.named_parameters()}
    for r in rows_of(run):
        names = list(sizes) if r["trained_group"] == -1 else groups[r["trained_group"]]
        payload = 3 * 4 * sum(sizes[n] for n in names)
        overhead = 3 * sum(NPY_HEADER + len(n) for n in names)
        assert r["bytes_up"] == payload + overhead, r["round"]
        assert r["trained_params"] == sum(sizes[n] for n in names)
        assert r["bytes_up_eval"] > 0  # partition 0's BN statistics, kept out of bytes_up
        assert len(r["train_seconds"]) == 3


def test_server_evaluates_with_partition_0_statistics(tiny_run: tuple[Path, RecordingGrid, dict[str, Any]]) -> None:
    run, grid, raw = tiny_run
    model, _ = structure(raw)
    buffers = [n for n, _ in model.named_buffers()]
    states = {}
    for c in grid.contexts.values():
        pid = int(c.node_config["partition-id"])  # type: ignore[arg-type]
        states[pid] = ContextStore(c).load(pid, BN_STATE)
    assert not np.array_equal(states[0]["1.running_mean"], states[1]["1.running_mean"])  # statistics are per client
    with np.load(run / "model.npz") as saved:
        final = {k: saved[k] for k in saved.files}
    for n in buffers:
        assert np.array_equal(final[n].reshape(-1), states[0][n].reshape(-1)), n
    model.load_state_dict({k: torch.from_numpy(v.reshape(model.state_dict()[k].shape)) for k, v in final.items()})
    ds = dataset_for(resolve(raw)[0])
    acc, loss = evaluate(model, torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test))
    assert rows_of(run)[-1]["accuracy"] == pytest.approx(acc, abs=1e-12)
    assert rows_of(run)[-1]["loss"] == pytest.approx(loss, rel=1e-6)
