"""FedPeWS-Fixed's batched warm-up kernel (``methods/pews_fixed_kernel.py``), the worked example of
docs/architecture.md's "Add a batched kernel": the ``client-batch = 8`` run is the one-at-a-time
run within the batched engine's tolerance (tests/test_batched_engine.py's check, with
``batch-fallback = error``), its warm-up rounds trained by this kernel in chunks of 6; a kernel
that leaks one client's neuron mask to the others, or raises, fails that check."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedapp.batched import seam
from fedapp.engine.batched_executor import BatchFallbackError
from fedapp.methods.pews_fixed_kernel import FixedWarmupCall
from tests.test_batched_engine import METHODS, check_equivalence, run

FIXED = METHODS["fedpews-fixed"]  # 6 clients, 3 rounds, the first 2 warm-up rounds


@pytest.fixture
def fixed_chunks(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """Chunk sizes the kernels trained, counted once they returned: (every kernel's, this kernel's)."""
    every: list[int] = []
    fixed: list[int] = []
    for call_type, kernel in list(seam._KERNELS.items()):

        def count(calls: Any, train: Any = kernel.train, mine: bool = call_type is FixedWarmupCall) -> list[Any]:
            out = train(calls)
            every.append(len(calls))
            if mine:
                fixed.append(len(calls))
            return list(out)

        monkeypatch.setitem(seam._KERNELS, call_type, dataclasses.replace(kernel, train=count))
    return every, fixed


def test_the_fixed_warmup_batched_is_the_one_at_a_time_run(tmp_path: Path, fixed_chunks: tuple[list[int], list[int]]) -> None:
    every, fixed = fixed_chunks
    notes = check_equivalence(tmp_path, FIXED, every)
    assert fixed == [6, 6]  # both warm-up rounds: one chunk of all 6 clients, none one at a time
    assert notes == [{"chunks": [6], "one_at_a_time": {}, "splits": []}] * 3


def test_a_kernel_that_leaks_one_clients_mask_fails_the_check(
    tmp_path: Path, fixed_chunks: tuple[list[int], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: the kernel hands every client of a chunk the first client's block. The check
    refuses the run, and the final model differs from the one-at-a-time run by far more than the tolerance."""
    every, fixed = fixed_chunks
    kernel = seam._KERNELS[FixedWarmupCall]

    def leaky(calls: Any) -> list[Any]:
        return list(kernel.train([dataclasses.replace(c, neurons=calls[0].neurons) for c in calls]))

    monkeypatch.setitem(seam._KERNELS, FixedWarmupCall, dataclasses.replace(kernel, train=leaky))
    with pytest.raises(AssertionError, match="model"):
        check_equivalence(tmp_path, FIXED, every)
    assert fixed == [6, 6]  # the leaky kernel did train both warm-up rounds
    a, b = np.load(tmp_path / "cb1" / "model.npz"), np.load(tmp_path / "cb8" / "model.npz")
    gap = max(float(np.abs(a[k] - b[k]).max()) for k in a.files)
    assert gap > 1e-3, gap


def test_a_raising_kernel_stops_the_run_naming_the_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = seam._KERNELS[FixedWarmupCall]

    def broken(calls: Any) -> list[Any]:
        raise RuntimeError("no vmap rule for aten::frobnicate")

    monkeypatch.setitem(seam._KERNELS, FixedWarmupCall, dataclasses.replace(kernel, train=broken))
    with pytest.raises(BatchFallbackError, match=r"failed on a FedPeWS-Fixed warm-up chunk of 6 clients \(RuntimeError: no vmap rule"):
        run(tmp_path, FIXED, "8")
