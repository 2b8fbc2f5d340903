"""How arrays travel: dense, or only the selected values plus a packed mask.

A masked tensor is sent as its selected values (C order) in the ``values`` record and
its mask in the ``mask`` record, in the cheaper of two packed-bit forms:

* ``name#rows`` + ``name#cols``: a mask that is an outer product of a row mask and a
  column mask over the tensor viewed as [shape[0], rest] (every neuron-structured
  mask: FedPeWS, FedSPU, FjORD). Costs (rows + cols) / 8 bytes.
* ``name``: np.packbits over all entries (coordinate masks: FedSelect). n / 8 bytes.

A tensor whose mask is all ones travels dense with no mask; all zeros, not at all.
Decoding validates names, dtypes, shapes, mask lengths, value counts and finiteness,
and raises :class:`WireError` with the reason, so a bad reply is dropped, not averaged.
"""

from __future__ import annotations

import io
import math
from functools import lru_cache

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.common.constant import SType

from fedapp.core.aggregate import Contribution
from fedapp.downlink.precision import widen

ROWS, COLS = "#rows", "#cols"
RESERVED = frozenset(
    {"arrays", "arrays-mask", "config", "values", "mask", "metrics"}
)  # record names of the core messages: a method's extra records use others


class WireError(ValueError):
    """A reply's arrays do not match what the server expects."""


def to_record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: npy_array(np.asarray(v, order="C")) for k, v in arrays.items()})  # keeps 0-d shapes (BN counters)


def from_record(record: ArrayRecord) -> dict[str, np.ndarray]:
    """Writable arrays, as ``Array.numpy()`` gives them (one copy of each view, not np.load's chunked read)."""
    return {k: view_array(v).copy() for k, v in record.items()}


@lru_cache(maxsize=1024)
def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def view_array(a: Array) -> np.ndarray:
    """``a.numpy()`` without np.load's per-tensor header parsing (~80 us each): where the
    bytes begin with exactly the npy header ``np.save`` writes for the Array's own dtype and
    shape and hold exactly that many values, they are viewed in place (read-only); anything
    else goes through ``a.numpy()``, which validates it."""
    try:
        dtype, shape = np.dtype(a.dtype), tuple(int(d) for d in a.shape)
    except (TypeError, ValueError):
        return a.numpy()
    descr = np.lib.format.dtype_to_descr(dtype)
    if a.stype != SType.NUMPY or dtype.hasobject or not isinstance(descr, str):
        return a.numpy()
    header = _npy_header(descr, shape)
    if not a.data.startswith(header) or len(a.data) - len(header) != dtype.itemsize * math.prod(shape):
        return a.numpy()
    return np.frombuffer(a.data, dtype, offset=len(header)).reshape(shape)


def npy_array(a: np.ndarray) -> Array:
    """``Array(a)`` with the very bytes ``np.save`` writes (npy 1.0 header + C-order values),
    built without np.save's per-tensor stream: the same message, byte for byte, cheaper."""
    descr = np.lib.format.dtype_to_descr(a.dtype)
    if a.dtype.hasobject or not a.flags.c_contiguous or not isinstance(descr, str):
        return Array(a)
    header = _npy_header(descr, a.shape)
    if len(header) > 65535 + 10:  # np.save would switch to npy 2.0
        return Array(a)
    return Array(dtype=str(a.dtype), shape=tuple(a.shape), stype=SType.NUMPY, data=header + a.tobytes())


def read_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    """:func:`from_record` as read-only views (the client's decode of what the server sent)."""
    return {k: view_array(v) for k, v in record.items()}


def outer_factors(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Row and column masks whose outer product is ``mask`` (viewed 2-D), if any."""
    m2 = mask.reshape(mask.shape[0], -1) if mask.ndim > 1 else None
    if m2 is None:
        return None
    rows, cols = np.asarray(m2.any(axis=1)), np.asarray(m2.any(axis=0))
    return (rows, cols) if np.array_equal(np.outer(rows, cols), m2) else None


def encode(arrays: dict[str, np.ndarray], masks: dict[str, np.ndarray] | None = None) -> tuple[ArrayRecord, ArrayRecord]:
    """Encode tensors (with optional boolean masks of the same shapes) for the wire."""
    values: dict[str, np.ndarray] = {}
    bits: dict[str, np.ndarray] = {}
    masks = masks or {}
    for name, arr in arrays.items():
        m = masks.get(name)
        if m is None or m.all():
            values[name] = arr
            continue
        if m.shape != arr.shape:
            raise ValueError(f"mask for {name} has shape {m.shape}, tensor has {arr.shape}")
        if not m.any():
            continue
        values[name] = arr[m]
        factors = outer_factors(m)
        if factors is not None:
            bits[name + ROWS] = np.packbits(factors[0])
            bits[name + COLS] = np.packbits(factors[1])
        else:
            bits[name] = np.packbits(m.reshape(-1))
    return to_record(values), to_record(bits)


def byte_limits(expected: dict[str, np.ndarray]) -> tuple[dict[str, int], dict[str, int]]:
    """The most data bytes each ``values`` and each ``mask`` array of a reply may hold (checked before decoding)."""
    values = {name: ref.nbytes for name, ref in expected.items()}
    bits: dict[str, int] = {}
    for name, ref in expected.items():
        bits[name] = (ref.size + 7) // 8
        if ref.ndim > 1:
            bits[name + ROWS] = (ref.shape[0] + 7) // 8
            bits[name + COLS] = (ref.size // max(ref.shape[0], 1) + 7) // 8
    return values, bits


def _unpack(bits: np.ndarray, count: int, what: str) -> np.ndarray:
    if bits.dtype != np.uint8 or bits.ndim != 1 or bits.size != (count + 7) // 8:
        raise WireError(f"{what}: expected {(count + 7) // 8} packed uint8 bytes, got {bits.dtype} {bits.shape}")
    return np.unpackbits(bits, count=count).astype(bool)


def decode(
    values: ArrayRecord, mask: ArrayRecord | None, expected: dict[str, np.ndarray], weight: float, wire_dtype: str = "float32"
) -> Contribution:
    """Decode and validate a reply against the server's tensors (names, shapes, dtypes); float32
    tensors sent as ``wire_dtype`` (fedapp.downlink.precision) are widened first."""
    try:
        vals = widen(from_record(values), expected, wire_dtype)
    except ValueError as err:
        raise WireError(str(err)) from None
    bits = from_record(mask) if mask is not None else {}
    masks: dict[str, np.ndarray] = {}
    for name, v in vals.items():
        ref = expected.get(name)
        if ref is None:
            raise WireError(f"unknown tensor {name!r}")
        if v.dtype != ref.dtype:
            raise WireError(f"{name}: dtype {v.dtype}, expected {ref.dtype}")
        if name in bits:
            masks[name] = _unpack(bits.pop(name), ref.size, name)
        elif name + ROWS in bits or name + COLS in bits:
            view = ref.reshape(ref.shape[0], -1)
            rows = _unpack(bits.pop(name + ROWS, np.zeros(0, np.uint8)), view.shape[0], name + ROWS)
            cols = _unpack(bits.pop(name + COLS, np.zeros(0, np.uint8)), view.shape[1], name + COLS)
            masks[name] = np.outer(rows, cols).reshape(-1)
        elif v.shape != ref.shape:
            raise WireError(f"{name}: dense shape {v.shape}, expected {ref.shape}")
        if name in masks and (v.ndim != 1 or v.size != int(masks[name].sum())):
            raise WireError(f"{name}: {v.size} values for a mask selecting {int(masks[name].sum())}")
        if np.issubdtype(v.dtype, np.floating) and not np.isfinite(v).all():
            raise WireError(f"{name}: non-finite values")
    if bits:
        raise WireError(f"mask entries without values: {', '.join(sorted(bits))}")
    return Contribution(weight=weight, values=vals, masks=masks)


def dense_masks(contribution: Contribution, expected: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Boolean masks shaped like each tensor for what a contribution covered (all tensors)."""
    out = {}
    for name, ref in expected.items():
        m = contribution.mask_of(name, ref.size)
        out[name] = (np.zeros(ref.size, bool) if m is None else m).reshape(ref.shape)
    return out


def scatter(contribution: Contribution, expected: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Full tensors: the sent values where the mask is on, the expected values elsewhere."""
    out = {}
    for name, ref in expected.items():
        m = contribution.mask_of(name, ref.size)
        full = ref.reshape(-1).copy()
        if m is not None:
            full[m] = contribution.values[name].reshape(-1)
        out[name] = full.reshape(ref.shape)
    return out
