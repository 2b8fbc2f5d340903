"""FedPeWS through the real server loop, strategy and ClientApp (in-process engine):
warmup/full phases, the upload on the wire in bytes, and composition with FedProx."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Message

from fedapp.client_app import app as client_app
from fedapp.core.masks import neuron_layout
from fedapp.core.wire import from_record
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.pews_train import records_to_masks
from fedapp.models.mlp import mlp
from fedapp.server.loop import serve
from fedapp.sim.run_local import full_config, run_local

# digits (64 pixels, 10 classes), MLP 64-8-6-10, two label-disjoint clients; W = round(0.5 * 3) = 2.
BASE = {
    "dataset": "digits", "partition": "0,2,4,6,8|1,3,5,7,9", "num-clients": 2, "mlp-hidden": "8,6",
    "num-server-rounds": 3, "warmup-fraction": 0.5, "lr": 0.05, "client-weighting": "uniform",
}  # fmt: skip
SHAPES = {"1.weight": (8, 64), "1.bias": (8,), "3.weight": (6, 8), "3.bias": (6,), "5.weight": (10, 6), "5.bias": (10,)}


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def npy(shape: tuple[int, ...], dtype: type = np.float32) -> int:
    """Bytes of one array as Flower's ArrayRecord stores it (np.save format)."""
    buf = io.BytesIO()
    np.save(buf, np.zeros(shape, dtype))
    return len(buf.getvalue())


def dense_upload() -> int:
    return sum(npy(shape) + len(name) for name, shape in SHAPES.items())


def fixed_half_upload() -> int:
    """One client's warmup upload with half of every hidden layer (4 of 8, 3 of 6), by hand:
    values at kept entries, row/col bits for weight matrices, flat bits for hidden biases."""
    values = {"1.weight": 4 * 64, "1.bias": 4, "3.weight": 3 * 4, "3.bias": 3, "5.weight": 10 * 3, "5.bias": 10}
    bits = {"1.weight#rows": 1, "1.weight#cols": 8, "1.bias": 1, "3.weight#rows": 1, "3.weight#cols": 1, "3.bias": 1}
    bits |= {"5.weight#rows": 2, "5.weight#cols": 1}
    return sum(npy((n,)) + len(k) for k, n in values.items()) + sum(npy((n,), np.uint8) + len(k) for k, n in bits.items())


def test_fixed_warmup_uploads_exactly_the_block_values_plus_mask_bits(tmp_path: Path) -> None:
    got = rows(run_local({**BASE, "method": "fedpews-fixed", "run-dir": str(tmp_path / "fixed")}))
    avg = rows(run_local({**BASE, "method": "fedavg", "num-server-rounds": 1, "run-dir": str(tmp_path / "avg")}))
    assert [r["warmup"] for r in got] == [True, True, False]
    for r in got[:2]:
        assert r["bytes_up"] == 2 * fixed_half_upload()
        assert r["mask_density"] == 0.5 and r["mask_overlap"] == 0.0  # disjoint halves
        assert r["coverage"] == 1.0 - (2 * 3 * 4) / (64 * 8 + 8 + 8 * 6 + 6 + 6 * 10 + 10)  # only 3.weight's cross-block entries
    assert got[2]["bytes_up"] == avg[0]["bytes_up"] == 2 * dense_upload()
    assert "mask_density" not in got[2]


class RecordingGrid(LocalGrid):
    """LocalGrid that keeps every train reply, so a test can inspect what went on the wire."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replies: list[tuple[Message, Message]] = []

    def _deliver(self, msg: Message) -> Message:
        reply = super()._deliver(msg)
        if msg.metadata.message_type == "train":
            self.replies.append((msg, reply))
        return reply


@pytest.mark.parametrize("extent", ["outer", "rows"])
def test_learned_warmup_uploads_masked_values_plus_neuron_bits_then_dense(tmp_path: Path, extent: str) -> None:
    raw = full_config({**BASE, "method": "fedpews", "diversity-weight": 1.0, "mask-extent": extent, "run-dir": str(tmp_path / "pews")})
    grid = RecordingGrid(client_app, raw, 2)
    got = rows(serve(grid, raw, discovery_timeout=5.0))
    layout = neuron_layout(mlp(64, (8, 6), 10))
    assert [r["warmup"] for r in got] == [True, True, False]
    for rnd, row in enumerate(got, start=1):
        sent = [(m, r) for m, r in grid.replies if m.content.config_records["config"]["server-round"] == rnd]
        assert row["bytes_up"] == sum(sum(rec.count_bytes() for rec in r.content.array_records.values()) for _, r in sent)
        if not row["warmup"]:
            assert row["bytes_up"] == 2 * dense_upload()
            assert all(
                set(r.content.array_records) == {"values", "mask"} and not from_record(r.content.array_records["mask"]) for _, r in sent
            )
            continue
        densities = []
        for msg, reply in sent:
            assert "pews-ref" in msg.content.array_records  # lambda > 0: the server sends ref_i
            neuron = records_to_masks(from_record(reply.content.array_records["pews-mask"]), layout)
            densities.append(neuron.mean())
            m1, m2 = neuron[:8], neuron[8:]
            values = from_record(reply.content.array_records["values"])
            if extent == "outer":
                expected = {"1.weight": m1.sum() * 64, "1.bias": m1.sum(), "3.weight": m2.sum() * m1.sum(), "3.bias": m2.sum()}
                expected |= {"5.weight": 10 * m2.sum(), "5.bias": 10}
            else:  # incoming weights and bias of kept neurons; the output layer whole
                expected = {"1.weight": m1.sum() * 64, "1.bias": m1.sum(), "3.weight": m2.sum() * 8, "3.bias": m2.sum()}
                expected |= {"5.weight": 10 * 6, "5.bias": 10}
            assert {k: v.size for k, v in values.items()} == {k: int(v) for k, v in expected.items() if v > 0}
            bits = from_record(reply.content.array_records["mask"])
            if m1.any() and not m1.all():
                assert np.array_equal(np.unpackbits(bits["1.weight#rows"], count=8).astype(bool), m1)
            assert set(reply.content.array_records) == {"values", "mask", "pews-mask"}  # scores never travel
        assert row["mask_density"] == np.mean(densities)
        assert row["bytes_up"] < 2 * dense_upload()


def test_fedprox_base_composes_with_the_warmup(tmp_path: Path) -> None:
    cfg = {**BASE, "method": "fedpews", "num-server-rounds": 2, "warmup-fraction": 0.5}
    avg = rows(run_local({**cfg, "run-dir": str(tmp_path / "a")}))
    prox0 = rows(run_local({**cfg, "base": "fedprox", "proximal-mu": 0.0, "run-dir": str(tmp_path / "p0")}))
    prox = rows(run_local({**cfg, "base": "fedprox", "proximal-mu": 5.0, "run-dir": str(tmp_path / "p5")}))
    assert [r["warmup"] for r in avg] == [True, False]
    assert [r["loss"] for r in avg] == [r["loss"] for r in prox0]  # mu = 0: FedProx+PeWS is FedAvg+PeWS
    assert prox[0]["loss"] != avg[0]["loss"]  # the proximal term acts inside warmup (on the masked entries)
    assert prox[1]["loss"] != avg[1]["loss"]
