"""Wire encoding: sizes computed from the masks, round trips, and rejected replies."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from fedapp.core import wire
from fedapp.core.config import RunConfig
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


EXPECTED = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32), "e": np.zeros(8, np.float32), "t": np.zeros(10, np.float32)}


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
        (rec(), rec(**{"w#rows": np.packbits([1, 1]), "w#cols": np.packbits([1, 0, 0])}), "mask entries without values: w#cols, w#rows$"),
        (rec(b=np.zeros(1, np.float32)), rec(b=np.zeros(1, np.int8)), r"^b: expected 1 packed uint8 bytes, got int8 \(1,\)"),
        (rec(b=np.zeros(1, np.float32)), rec(b=np.zeros((1, 1), np.uint8)), r"^b: expected 1 packed uint8 bytes, got uint8 \(1, 1\)"),
        (rec(e=np.zeros(1, np.float32)), rec(e=np.zeros(2, np.uint8)), r"^e: expected 1 packed uint8 bytes"),  # 8 entries: 1 byte
        (rec(t=np.zeros(1, np.float32)), rec(t=np.zeros(1, np.uint8)), r"^t: expected 2 packed uint8 bytes"),  # 10 entries: 2 bytes
        # a structured mask needs both halves: the missing one is an empty (wrong) byte string
        (
            rec(w=np.zeros(1, np.float32)),
            rec(**{"w#rows": np.packbits([1, 0])}),
            r"^w#cols: expected 1 packed uint8 bytes, got uint8 \(0,\)",
        ),
        (
            rec(w=np.zeros(1, np.float32)),
            rec(**{"w#cols": np.packbits([1, 0, 0])}),
            r"^w#rows: expected 1 packed uint8 bytes, got uint8 \(0,\)",
        ),
    ],
)
def test_decode_rejects_bad_replies_with_reason(values: ArrayRecord, bits: ArrayRecord, reason: str) -> None:
    with pytest.raises(wire.WireError, match=reason):
        wire.decode(values, bits, EXPECTED, 1.0)


def test_byte_limits_by_hand() -> None:
    expected: dict[str, np.ndarray] = {
        "w": np.zeros((9, 2, 2), np.float32),
        "v": np.zeros(17, np.float64),
        "n": np.array(3, np.int64),
        "z": np.zeros((0, 4), np.float32),
        "r": np.zeros((1, 10), np.float16),
    }
    values, bits = wire.byte_limits(expected)
    assert values == {"w": 9 * 4 * 4, "v": 17 * 8, "n": 8, "z": 0, "r": 20}
    # coordinate masks: ceil(size / 8); structured: ceil(rows / 8) and ceil(size / rows / 8), only for tensors of 2+ dims
    assert bits == {"w": 5, "w#rows": 2, "w#cols": 1, "v": 3, "n": 1, "z": 0, "z#rows": 0, "z#cols": 0, "r": 2, "r#rows": 1, "r#cols": 2}
    assert all(type(n) is int for n in (*values.values(), *bits.values()))  # byte counts, compared with sizes


def test_decode_of_a_dense_reply_without_a_mask_record_and_masks_are_flat_booleans() -> None:
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32), "u": np.ones(2, np.float32)}
    got = wire.decode(wire.to_record({"w": arrays["w"], "b": arrays["b"]}), None, arrays, 1.0)
    assert got.masks == {} and got.values["w"].shape == (2, 3)
    assert wire.dense_masks(got, arrays)["u"].dtype == bool and not wire.dense_masks(got, arrays)["u"].any()  # unsent: all False
    np.testing.assert_array_equal(wire.scatter(got, {k: np.zeros_like(a) for k, a in arrays.items()})["w"], arrays["w"])
    structured = np.array([[True, False, True], [False, False, False]])  # rows {0} x cols {0, 2}
    coordinate = np.array([[True, False, False], [False, True, True]])
    for mask in (structured, coordinate):
        values, bits = wire.encode({"w": arrays["w"]}, {"w": mask})
        assert ("w#rows" in bits) == (mask is structured)
        got = wire.decode(values, bits, arrays, 1.0)
        assert got.masks["w"].dtype == bool and got.masks["w"].tolist() == mask.reshape(-1).tolist()
        np.testing.assert_array_equal(wire.scatter(got, arrays)["w"], arrays["w"])  # sent values back in place
    with pytest.raises(ValueError, match=r"^mask for w has shape \(3,\), tensor has \(2, 3\)$"):
        wire.encode({"w": arrays["w"]}, {"w": np.array([True, False, True])})


def test_read_arrays_are_read_only_views_of_the_message_bytes_and_odd_arrays_go_through_numpy() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    record = wire.to_record({"x": x, "n": np.array(7, np.int64), "f": np.asfortranarray(x)})
    assert record["f"].data == record["x"].data  # a Fortran-ordered tensor travels in C order, the same bytes
    views = wire.read_arrays(record)
    for k in ("x", "f"):
        assert views[k].shape == (2, 3) and views[k].dtype == np.float32 and not views[k].flags.writeable
        np.testing.assert_array_equal(views[k], x)
    assert views["n"].shape == () and int(views["n"]) == 7
    copies = wire.from_record(record)
    assert copies["x"].flags.writeable and np.array_equal(copies["x"], x)
    # anything but the exact header for the Array's own dtype and shape goes through Array.numpy()
    other = Array(dtype="float32", shape=(2, 3), stype="numpy.ndarray", data=wire.npy_array(x.astype(np.int32)).data)
    assert wire.view_array(other).dtype == np.int32  # what the bytes say, not reinterpreted as float32
    short = Array(dtype="float32", shape=(2, 3), stype="numpy.ndarray", data=record["x"].data[:-4])
    with pytest.raises(ValueError):
        wire.view_array(short)
    with pytest.raises(TypeError, match="Unsupported serialization type"):
        wire.view_array(Array(dtype="float32", shape=(2, 3), stype="torch", data=record["x"].data))
    rec_dtype = np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")])  # a structured dtype: its descr is a list
    assert wire.view_array(Array(rec_dtype)).tolist() == rec_dtype.tolist()


def test_npy_array_writes_exactly_what_np_save_writes() -> None:
    import io

    for a in (np.arange(6, dtype=np.float32).reshape(2, 3), np.array(7, np.int64), np.array([True, False]), np.zeros((0, 3), np.float16)):
        buf = io.BytesIO()
        np.save(buf, a)
        arr = wire.npy_array(a)
        assert arr.data == buf.getvalue() and arr.dtype == str(a.dtype) and tuple(arr.shape) == a.shape
    f = wire.npy_array(np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))  # not C-contiguous: Array(a) writes it
    np.testing.assert_array_equal(f.numpy(), np.arange(6).reshape(2, 3))
    s = np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")])
    assert wire.npy_array(s).numpy().tolist() == s.tolist()
    with pytest.raises(ValueError, match="Object arrays cannot be saved"):  # never pointers on the wire
        wire.npy_array(np.array([1, "a"], dtype=object))
