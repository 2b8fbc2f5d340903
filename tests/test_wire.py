"""Wire encoding: sizes computed from the masks, round trips, and rejected replies."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from fedapp import wire
from fedapp.config import RunConfig
from fedapp.models import build_model

NPY_OVERHEAD = 160  # npy header (128 bytes) + key name, per array entry: bounded overhead


def cnn_arrays() -> dict[str, np.ndarray]:
    model = build_model(RunConfig(model="cnn"), (3, 32, 32), 20, seed=0)
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def quarter_masks(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Exactly 25% dense: first half of rows x first half of columns; first quarter of a vector."""
    masks = {}
    for k, a in arrays.items():
        m = np.zeros(a.shape, bool)
        if a.ndim == 1:
            m[: a.size // 4] = True
        else:
            view = m.reshape(a.shape[0], -1)
            view[: a.shape[0] // 2, : view.shape[1] // 2] = True
        masks[k] = m
    return masks


def payload_bytes(arrays: dict[str, np.ndarray], masks: dict[str, np.ndarray], structured: bool) -> tuple[int, int]:
    """Expected (payload bytes, number of array entries) computed from the masks alone."""
    total, entries = 0, 0
    for k, m in masks.items():
        total += int(m.sum()) * arrays[k].itemsize
        entries += 1
        if structured and m.ndim > 1:
            rows, cols = m.shape[0], m.size // m.shape[0]
            total += (rows + 7) // 8 + (cols + 7) // 8
            entries += 2
        else:
            total += (m.size + 7) // 8
            entries += 1
    return total, entries


def test_quarter_dense_structured_mask_costs_at_most_027_of_dense() -> None:
    arrays = cnn_arrays()
    masks = quarter_masks(arrays)
    assert sum(int(m.sum()) for m in masks.values()) / sum(m.size for m in masks.values()) == pytest.approx(0.25, abs=0.002)
    values, bits = wire.encode(arrays, masks)
    measured = values.count_bytes() + bits.count_bytes()
    dense_values, dense_bits = wire.encode(arrays)
    dense = dense_values.count_bytes() + dense_bits.count_bytes()
    expected, entries = payload_bytes(arrays, masks, structured=True)
    assert expected <= measured <= expected + NPY_OVERHEAD * entries
    assert measured / dense <= 0.27, measured / dense


def test_coordinate_mask_costs_values_plus_one_bit_per_entry() -> None:
    arrays = cnn_arrays()
    rng = np.random.default_rng(0)
    masks = {k: rng.random(a.shape) < 0.25 for k, a in arrays.items()}
    values, bits = wire.encode(arrays, masks)
    measured = values.count_bytes() + bits.count_bytes()
    expected, entries = payload_bytes(arrays, masks, structured=False)
    assert expected <= measured <= expected + NPY_OVERHEAD * entries


def test_round_trip_restores_selected_values_and_masks() -> None:
    arrays = cnn_arrays()
    masks = quarter_masks(arrays)
    masks["3.bias"] = np.ones_like(masks["3.bias"])  # all ones travels dense
    masks["0.bias"] = np.zeros_like(masks["0.bias"])  # all zeros does not travel
    values, bits = wire.encode(arrays, masks)
    assert "0.bias" not in values and "3.bias" not in bits
    got = wire.decode(values, bits, arrays, weight=2.0)
    full = wire.scatter(got, {k: np.zeros_like(a) for k, a in arrays.items()})
    for k, a in arrays.items():
        np.testing.assert_array_equal(full[k], np.where(masks[k], a, 0))
        np.testing.assert_array_equal(wire.dense_masks(got, arrays)[k], masks[k])
    assert got.weight == 2.0


def rec(**arrays: np.ndarray) -> ArrayRecord:
    return ArrayRecord({k: Array(v) for k, v in arrays.items()})


EXPECTED = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}


@pytest.mark.parametrize(
    ("values", "bits", "reason"),
    [
        (rec(x=np.zeros(3, np.float32)), rec(), "unknown tensor 'x'"),
        (rec(w=np.zeros((3, 2), np.float32)), rec(), "dense shape"),
        (rec(b=np.zeros(3, np.float64)), rec(), "dtype float64"),
        (rec(b=np.array([1.0, np.nan, 2.0], np.float32)), rec(), "non-finite"),
        (rec(b=np.zeros(2, np.float32)), rec(b=np.packbits([True, False, False])), "2 values for a mask selecting 1"),
        (rec(b=np.zeros(1, np.float32)), rec(b=np.zeros(3, np.uint8)), "expected 1 packed uint8 bytes"),
        (rec(), rec(b=np.packbits([True, False, False])), "mask entries without values"),
    ],
)
def test_decode_rejects_bad_replies_with_reason(values: ArrayRecord, bits: ArrayRecord, reason: str) -> None:
    with pytest.raises(wire.WireError, match=reason):
        wire.decode(values, bits, EXPECTED, 1.0)
