"""``downlink = selected`` with FedPeWS: a warm-up round moves only the entries some client's mask
held, so a node gets just the entries changed since its last model (a packed mask plus their values)
and rebuilds the rest from its cache. The warm-up reads the whole model (fresh mask draws every
minibatch, and the score gradient goes through off neurons' weights), so nothing less would do; the
results must be bit-identical to ``downlink = full``. Checked against the full run's own models and
replies, computed here independently of fedapp.downlink."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedapp.core import wire
from tests.test_downlink import Recording, missing, rows_of, run, same_results

PEWS = {
    "method": "fedpews", "base": "fedavg", "dataset": "digits", "model": "mlp", "mlp-hidden": "32,32",
    "partition": "0,2,4,6,8|1,3,5,7,9", "num-clients": 2, "local-steps": 3, "batch-size": 32, "lr": 0.05,
    "warmup-fraction": 0.6, "diversity-weight": 1.0, "num-server-rounds": 5, "client-weighting": "uniform",
}  # fmt: skip
WARM = 3  # round(0.6 * 5): rounds 1-3 warm up, 4-5 are FedAvg


def bits_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([x.tobytes() != y.tobytes() for x, y in zip(a.reshape(-1), b.reshape(-1), strict=True)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[tuple[Path, Recording], tuple[Path, Recording]]:
    """Partition 0's cache is lost before round 4: it must get the full model (no mask record) then."""
    tmp = tmp_path_factory.mktemp("downlink-pews")
    return run(tmp, "full", {(4, 0): missing}, **PEWS), run(tmp, "sel", {(4, 0): missing}, downlink="selected", **PEWS)


def test_selected_matches_full_and_sends_exactly_the_changed_entries(runs: tuple[tuple[Path, Recording], ...]) -> None:
    (full, full_grid), (sel, grid) = runs
    same_results(full, sel)
    models = {r: wire.from_record(full_grid.messages_of(r)[0][1].content["arrays"]) for r in range(1, 6)}  # type: ignore[arg-type]
    masked_rounds = set()
    for r in range(2, 6):
        prev = models[r - 1]
        # the entries the previous round's replies covered (their upload masks): nothing else may move
        covered = {n: np.zeros(a.size, bool) for n, a in prev.items()}
        for _, _, reply in full_grid.messages_of(r - 1):
            got = wire.decode(reply.content["values"], reply.content.array_records.get("mask"), prev, 1.0)  # type: ignore[arg-type]
            for n in got.values:
                covered[n] |= got.mask_of(n, prev[n].size)  # type: ignore[arg-type]  # sent, so never None
        for pid, msg, _ in grid.messages_of(r):
            if (r, pid) == (4, 0):
                continue  # the cache-miss round, below
            sent = wire.decode(msg.content["arrays"], msg.content.array_records.get("arrays-mask"), prev, 1.0)  # type: ignore[arg-type]
            for n, now in models[r].items():
                changed = bits_differ(prev[n], now)
                assert not (changed & ~covered[n]).any(), (r, n)  # the server moved only covered entries
                if not changed.any():
                    assert n not in sent.values, (r, n)
                    continue
                m = sent.masks.get(n)
                if m is None:  # the whole tensor
                    np.testing.assert_array_equal(sent.values[n], now)
                    continue
                masked_rounds.add(r)
                np.testing.assert_array_equal(m, changed)  # exactly the changed entries, with their new values
                np.testing.assert_array_equal(sent.values[n], now.reshape(-1)[changed])
    assert masked_rounds >= {2, 3, 4}  # rounds after a warm-up round: the union of two masks is not everything
    for row in rows_of(sel):  # every cache held: only the lost one was refused
        assert row["downlink"]["cache_miss"] == ({"0": "missing"} if row["round"] == 4 else {}), row["round"]
    down = {row["round"]: row["bytes_down"] for row in rows_of(full)}
    for row in rows_of(sel)[1:WARM]:
        assert row["bytes_down"] < 0.75 * down[row["round"]], row["round"]


def test_a_lost_cache_gets_the_full_model_without_a_mask(runs: tuple[tuple[Path, Recording], ...]) -> None:
    _, (sel, grid) = runs
    assert rows_of(sel)[3]["downlink"]["cache_miss"] == {"0": "missing"}
    first, second = [m for p, m, _ in grid.messages_of(4) if p == 0]
    assert "arrays-mask" in first.content.array_records  # round 3 was a warm-up round
    assert "arrays-mask" not in second.content.array_records
    assert int(second.content["config"]["downlink-base"]) == 0  # type: ignore[arg-type]
    assert len(second.content["arrays"]) == len(grid.train[0][0].content["arrays"])  # type: ignore[arg-type]


def test_changed_entries_travel_in_the_half_precision_wire(tmp_path: Path) -> None:
    """wire-dtype float16: the entries go as float16 and are widened before they are written over the cache."""
    over: dict[str, Any] = {**PEWS, "wire-dtype": "float16"}
    (full, _), (sel, grid) = run(tmp_path, "full", **over), run(tmp_path, "sel", downlink="selected", **over)
    same_results(full, sel)
    assert all(row["downlink"]["cache_miss"] == {} for row in rows_of(sel))
    masked = [m.content["arrays"] for m, _ in grid.train if "arrays-mask" in m.content.array_records]
    assert masked and all(a.dtype == "float16" for rec in masked for a in rec.values())  # type: ignore[union-attr]
