"""Checkpoint + resume=true with the in-process engine: a run cut after round 2 and resumed
equals the uninterrupted run, round for round (same arrays, same sampled clients)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedapp.core.config import ConfigError
from fedapp.server import checkpoint
from fedapp.sim.run_local import run_local
from tests.run_rows import WIRE, outcome_rows


def rows(run_dir: Path) -> list[dict[str, Any]]:
    """Outcome rows without the wire sizes (a resumed run's messages also name its lineage)."""
    return outcome_rows(run_dir, WIRE)


BASE = {"dataset": "digits", "num-clients": 3, "fraction-train": 0.67, "lr": 0.2, "local-steps": 3, "partition": "dirichlet"}


def test_resumed_run_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    straight = rows(run_local({**BASE, "num-server-rounds": 4, "run-dir": str(tmp_path / "a")}))
    cut = tmp_path / "b"
    run_local({**BASE, "num-server-rounds": 2, "run-dir": str(cut)})
    assert checkpoint.load(cut).round == 2  # type: ignore[union-attr]
    # a crash between writing round 3's metrics row and its checkpoint leaves an orphan row
    with (cut / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"round": 3, "accuracy": -1.0}) + "\n")
    resumed = rows(run_local({**BASE, "num-server-rounds": 4, "resume": True, "run-dir": str(cut)}))
    assert [r["round"] for r in resumed] == [1, 2, 3, 4]
    assert resumed == straight
    assert [r["clients"] for r in straight] == [2, 2, 2, 2]  # fraction 0.67 of 3: the RNG state matters
    a, b = np.load(tmp_path / "a" / "model.npz"), np.load(cut / "model.npz")
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize(
    "method",
    [
        {"method": "fedpews", "warmup-fraction": 0.75, "mlp-hidden": "32,32"},  # warmup (W = 3) spans the cut
        {"method": "fedspu", "early-stopping": True, "local-test-fraction": 0.3, "local-steps": 6},
    ],
    ids=["fedpews", "fedspu-es"],
)
def test_resumed_method_state_continues_exactly(tmp_path: Path, method: dict[str, Any]) -> None:
    """Server-side method state (FedPeWS last masks, FedSPU's early-stopping registry) is
    checkpointed, and client state on disk is found again under the same run token."""
    cfg = {**BASE, **method, "state-store": "disk"}
    total, cut_after = (8, 5) if method["method"] == "fedspu" else (4, 2)  # a client stops in round 6 (seed 0)
    straight = rows(run_local({**cfg, "num-server-rounds": total, "run-dir": str(tmp_path / "a")}))
    cut = tmp_path / "b"
    run_local({**cfg, "num-server-rounds": cut_after, "run-dir": str(cut)})
    assert checkpoint.load(cut).policy  # type: ignore[union-attr]  # something was checkpointed
    resumed = rows(run_local({**cfg, "num-server-rounds": total, "resume": True, "run-dir": str(cut)}))
    assert resumed == straight


def test_resume_keeps_the_run_token_and_a_fresh_run_gets_a_new_one(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run_local({**BASE, "num-server-rounds": 1, "run-dir": str(run)})
    first = checkpoint.load(run).token  # type: ignore[union-attr]
    run_local({**BASE, "num-server-rounds": 2, "resume": True, "run-dir": str(run)})
    assert checkpoint.load(run).token == first  # type: ignore[union-attr]
    run_local({**BASE, "num-server-rounds": 1, "run-dir": str(run), "overwrite": True})
    assert checkpoint.load(run).token != first  # type: ignore[union-attr]
    assert [r["round"] for r in rows(run)] == [1]


def test_resume_without_a_checkpoint_starts_at_round_one(tmp_path: Path) -> None:
    out = rows(run_local({**BASE, "num-server-rounds": 2, "resume": True, "run-dir": str(tmp_path / "new")}))
    assert [r["round"] for r in out] == [1, 2]


def test_resume_refuses_a_run_config_that_learns_something_else(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run_local({**BASE, "num-server-rounds": 1, "run-dir": str(run)})
    with pytest.raises(ConfigError, match=r"'lr' = 0.1 differs from 0.2"):
        run_local({**BASE, "lr": 0.1, "num-server-rounds": 2, "resume": True, "run-dir": str(run)})


def test_checkpoint_round_trips_policy_state_and_rng(tmp_path: Path) -> None:
    rng = random.Random(5)
    rng.random()
    state = {"last-mask": np.array([[True, False]]), "stopped": np.array([0, 3], np.int64)}
    ckpt = checkpoint.Checkpoint(7, {"w": np.arange(4, dtype=np.float32)}, state, rng.getstate(), "tok", finished=True)
    checkpoint.save(tmp_path, ckpt)
    back = checkpoint.load(tmp_path)
    assert back is not None and (back.round, back.token, back.finished) == (7, "tok", True)
    np.testing.assert_array_equal(back.arrays["w"], ckpt.arrays["w"])
    for k, v in state.items():
        np.testing.assert_array_equal(back.policy[k], v)
        assert back.policy[k].dtype == v.dtype
    restored = random.Random()
    restored.setstate(back.rng)
    assert [restored.random() for _ in range(3)] == [rng.random() for _ in range(3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.npz"]
