"""Half-precision wire (fedapp.downlink.precision): bfloat16 rounding against hand-computed bit
patterns, float16 as numpy's IEEE half, only float32 tensors narrowed (masks, integer buffers
untouched), and a reply that ignores ``wire-dtype`` refused by the server's decode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedapp.core import wire
from fedapp.downlink.precision import from_bfloat16, narrow, to_bfloat16, widen


def test_bfloat16_rounds_to_nearest_even_from_the_float32_bits() -> None:
    bits = np.array([0x3F800000, 0x3F808000, 0x3F818000, 0x3F80C000, 0x3F807FFF, 0xBF800001, 0x7F7FFFFF], np.uint32)
    # 1.0; halfway between 0x3F80 and 0x3F81 -> even 0x3F80; halfway 0x3F81/0x3F82 -> even 0x3F82;
    # above halfway -> up; just below halfway -> down; -1 - ulp -> -1; float32 max -> inf (0x7F80)
    want = np.array([0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x3F80, 0xBF80, 0x7F80], np.uint16)
    assert np.array_equal(to_bfloat16(bits.view(np.float32)), want)
    assert np.array_equal(from_bfloat16(want[:3]), np.array([1.0, 1.0, 1.015625], np.float32))
    nan = to_bfloat16(np.array([np.nan], np.float32))
    assert np.isnan(from_bfloat16(nan)).all()


def test_only_float32_tensors_are_narrowed_and_come_back_within_half_an_ulp() -> None:
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray] = {"w": rng.normal(size=(5, 7)).astype(np.float32), "n": np.array(3, np.int64)}
    for kind, rel in (("float16", 2.0**-11), ("bfloat16", 2.0**-8)):
        sent = narrow(arrays, kind)
        assert sent["n"] is arrays["n"]
        back = widen(sent, arrays, kind)
        assert back["w"].dtype == np.float32 and back["n"] is arrays["n"]
        assert np.all(np.abs(back["w"] - arrays["w"]) <= rel * np.abs(arrays["w"]))
        assert sent["w"].nbytes == arrays["w"].nbytes // 2


def test_masks_travel_unchanged_and_a_float32_reply_under_a_half_wire_is_refused() -> None:
    rng = np.random.default_rng(1)
    w = rng.normal(size=(6, 4)).astype(np.float32)
    mask = np.zeros((6, 4), bool)
    mask[[0, 3]] = True
    values, bits = wire.encode(narrow({"w": w}, "float16"), {"w": mask})
    _, bits32 = wire.encode({"w": w}, {"w": mask})
    assert wire.from_record(bits).keys() == wire.from_record(bits32).keys()
    assert all(np.array_equal(wire.from_record(bits)[k], wire.from_record(bits32)[k]) for k in wire.from_record(bits))
    got = wire.decode(values, bits, {"w": w}, 1.0, "float16")
    assert got.values["w"].dtype == np.float32
    assert np.array_equal(got.values["w"], w[mask].astype(np.float16).astype(np.float32))
    dense32, _ = wire.encode({"w": w})
    with pytest.raises(wire.WireError, match="expected float16"):
        wire.decode(dense32, None, {"w": w}, 1.0, "float16")


def test_a_float16_run_sends_half_values_both_ways_and_the_server_averages_them_in_float64(tmp_path: Path) -> None:
    from fedapp.client_app import app
    from fedapp.server.loop import serve
    from fedapp.sim.run_local import full_config
    from tests.test_downlink import Recording

    raw = full_config({
        "dataset": "digits", "model": "mlp", "partition": "iid", "num-clients": 2, "local-steps": 2, "num-server-rounds": 2,
        "client-weighting": "uniform", "wire-dtype": "float16", "run-dir": str(tmp_path / "run"),
    })  # fmt: skip
    grid = Recording(raw, 2)
    assert grid.client_app is app
    serve(grid, raw, discovery_timeout=5.0)
    for msg, reply in grid.train:
        assert {a.dtype for a in msg.content["arrays"].values()} == {"float16"}  # type: ignore[union-attr]
        assert {a.dtype for a in reply.content["values"].values()} == {"float16"}  # type: ignore[union-attr]
    first = [(m, r) for m, r in grid.train if m.content["config"]["server-round"] == 1]
    second = wire.from_record(grid.train[-1][0].content["arrays"])  # type: ignore[arg-type]
    start = widen(wire.from_record(first[0][0].content["arrays"]), second, "float16")  # type: ignore[arg-type]
    like = {n: a.astype(np.float32) for n, a in second.items()}
    replies = [widen(wire.from_record(r.content["values"]), like, "float16") for _, r in first]  # type: ignore[arg-type]
    for name, g in start.items():
        avg = (replies[0][name].astype(np.float64) + replies[1][name].astype(np.float64)) / 2.0
        g64 = g.astype(np.float64)
        want = (g64 - 1.0 * (g64 - avg)).astype(np.float32).astype(np.float16)
        assert np.array_equal(second[name], want), name
