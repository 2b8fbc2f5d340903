"""Half-precision wire (``wire-dtype = float16 | bfloat16``): float32 tensors travel as 16-bit
values both ways, everything else (integer buffers, packed masks, a method's own records) as it is.

float16 is numpy's IEEE half (round to nearest even; a value beyond +-65504 becomes inf, which
the server's finiteness check refuses like any non-finite reply). bfloat16, which numpy lacks,
travels as the upper 16 bits of the float32 (``uint16``), rounded to nearest even: float32's
range, 8 bits of mantissa. The receiver widens back to float32 before anything else reads the
values, so the server still averages in float64 (fedapp.core.aggregate) and keeps a float32 model;
only what crosses the wire is rounded.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

WIRE_DTYPES = ("float32", "float16", "bfloat16")


def wire_type(kind: str) -> np.dtype | None:
    """The dtype float32 values travel as (None: float32 itself)."""
    return {"float32": None, "float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16)}[kind]


def to_bfloat16(a: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))  # round to nearest, ties to even
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)  # keep NaN a NaN (rounding could carry it into inf)
    return out


def from_bfloat16(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)


def narrow(arrays: Mapping[str, np.ndarray], kind: str) -> dict[str, np.ndarray]:
    """``arrays`` with every float32 tensor as its wire type."""
    if kind == "float32":
        return dict(arrays)
    cast = to_bfloat16 if kind == "bfloat16" else (lambda a: a.astype(np.float16))
    return {n: cast(a) if a.dtype == np.float32 else a for n, a in arrays.items()}


def widen(arrays: Mapping[str, np.ndarray], like: Mapping[str, np.ndarray], kind: str) -> dict[str, np.ndarray]:
    """Received arrays back as float32 where the model's tensor is float32: ValueError if such a
    tensor did not come as the wire type (a sender that ignores ``wire-dtype``)."""
    wt = wire_type(kind)
    if wt is None:
        return dict(arrays)
    out = {}
    for n, a in arrays.items():
        ref = like.get(n)
        if ref is not None and ref.dtype == np.float32:
            if a.dtype != wt:
                raise ValueError(f"{n}: dtype {a.dtype}, expected {wt} (wire-dtype = {kind})")
            a = from_bfloat16(a) if kind == "bfloat16" else a.astype(np.float32)
        out[n] = a
    return out
