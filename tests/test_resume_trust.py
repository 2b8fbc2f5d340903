"""What a resumed run reads back is checked before use: the checkpoint (round, arrays) before any
training, and each client's stored state version before that client uses it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedapp.core.config import ConfigError
from fedapp.core.state import DiskStore, StateError
from fedapp.core.state_rounds import ATTEMPT, ROUND, Lineage, RoundStore, stamp
from fedapp.engine.local_grid import LocalGrid
from fedapp.server import checkpoint
from fedapp.server.loop import serve
from fedapp.sim.run_local import full_config, run_local
from tests.run_rows import outcome_rows

FEDAVG = {"dataset": "digits", "num-clients": 2, "lr": 0.2, "local-steps": 2}


def tamper(run: Path, change: dict[str, Any]) -> None:
    ckpt = checkpoint.load(run)
    assert ckpt is not None
    checkpoint.save(run, dataclasses.replace(ckpt, **change))


def first_weight(run: Path) -> str:
    return sorted(n for n in checkpoint.load(run).arrays if n.endswith("weight"))[0]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("round 999", r"round 999 is outside 1\.\.5 \(num-server-rounds\)"),
        ("round -5", r"round -5 is outside 1\.\.5"),
        ("misshaped array", r"array '.*weight' is float32\[3, 2\], the model's is float32\[\d+, \d+\]"),
        ("nan array", r"array '.*weight' has 1 non-finite values"),
    ],
)
def test_a_checkpoint_whose_contents_this_run_would_not_write_is_refused_before_training(tmp_path: Path, case: str, message: str) -> None:
    run = tmp_path / "r"
    run_local({**FEDAVG, "num-server-rounds": 2, "run-dir": str(run)})
    ckpt = checkpoint.load(run)
    assert ckpt is not None
    name = first_weight(run)
    if case.startswith("round"):
        tamper(run, {"round": int(case.split()[1])})
    elif case == "misshaped array":
        tamper(run, {"arrays": {**ckpt.arrays, name: np.zeros((3, 2), np.float32)}})
    else:
        bad = ckpt.arrays[name].copy()
        bad.flat[4] = np.nan
        tamper(run, {"arrays": {**ckpt.arrays, name: bad}})
    heightbefore, saved = (run / "metrics.jsonl").read_text(), (run / checkpoint.FILE).read_bytes()
    with pytest.raises(ConfigError, match=message):
        run_local({**FEDAVG, "num-server-rounds": 5, "resume": True, "run-dir": str(run)})
    assert (run / "metrics.jsonl").read_text() == heightbefore and (run / checkpoint.FILE).read_bytes() == saved


SELECT = {
    "method": "fedselect", "dataset": "digits", "num-clients": 3, "partition": "0,1,2|3,4,5|6,7,8,9", "local-test-fraction": 0.5,
    "local-alt-epochs": 1, "batch-size": 16, "state-store": "disk", "personal-rate": 0.25, "personal-limit": 0.3,
}  # fmt: skip


@pytest.mark.parametrize("case", ["wrong shape", "nan"])
def test_a_bad_client_state_version_is_moved_aside_named_once_and_the_client_goes_on(tmp_path: Path, case: str) -> None:
    run = tmp_path / "r"
    run_local({**SELECT, "num-server-rounds": 2, "run-dir": str(run)})
    store = DiskStore(checkpoint.client_state_dir(run))
    entries = store.read(1)
    assert stamp(entries)[0] == 2 and stamp(store.read(1, "prev"))[0] == 1
    name = "theta/" + first_weight(run)
    height, cols = entries[name].shape
    if case == "wrong shape":
        entries[name] = entries[name][:, :-1].copy()
    else:
        entries[name] = entries[name].copy()
        entries[name].flat[7] = np.inf
    store.write(1, "", entries)
    run_local({**SELECT, "num-server-rounds": 4, "resume": True, "run-dir": str(run)})
    rows = outcome_rows(run)
    assert [(r["round"], r["failed_pids"]) for r in rows] == [(1, []), (2, []), (3, [1]), (4, [])]
    reason = json.dumps(rows[2]["failure_reasons"])
    what = (
        f"is float32[{height}, {cols - 1}], expected float32[{height}, {cols}]"
        if case == "wrong shape"
        else f"is not finite (1 of {height * cols} values)"
    )
    assert str(store.path(1)) in reason and f"entry '{name}' {what}" in reason, reason
    aside = sorted(p.name for p in store.root.glob("client-1.npz.bad-*"))
    assert len(aside) == 1 and aside[0] in reason
    assert rows[3]["clients"] == 3 and rows[3]["evaluated_clients"] == 3  # client 1 trains again, from its round-1 state
    assert stamp(store.read(1))[0] == 4


def test_resume_refuses_client_state_that_lived_in_a_finished_runs_memory(tmp_path: Path) -> None:
    """Outside the in-process engine, Context.state belongs to one Flower run: a resumed run of a
    method with client state whose nodes kept it there is refused, naming the partition."""
    run = tmp_path / "r"
    cfg = {**SELECT, "state-store": "auto", "num-server-rounds": 1, "run-dir": str(run)}
    run_local(cfg)
    raw = full_config({**cfg, "num-server-rounds": 2, "resume": True})
    grid = LocalGrid(__import__("fedapp.client_app", fromlist=["app"]).app, raw, 3)
    grid.context_state = None  # as under flwr run: nothing keeps the nodes' Context.state
    with pytest.raises(ConfigError, match=r"resume=true: the node of partition 0 \(3 of 3 nodes\) kept its client state in Context.state"):
        serve(grid, raw, base=tmp_path)
    assert [r["round"] for r in outcome_rows(run)] == [1]


def test_a_version_with_a_stamp_fedapp_never_writes_is_moved_aside_and_named(tmp_path: Path) -> None:
    store = DiskStore(tmp_path)
    store.write(0, "", {"w/v": np.zeros(2), ROUND: np.array([1, 2]), ATTEMPT: np.array("")})
    with pytest.raises(StateError, match=r"client-0.npz version stamp '@/round' int64\[2\].*moved to client-0.npz.bad-"):
        RoundStore(store, 3, Lineage()).load(0, "w")
    assert store.read(0) == {} and len(list(tmp_path.glob("client-0.npz.bad-*"))) == 1
    assert RoundStore(store, 3, Lineage()).load(0, "w") == {}  # the next message starts afresh
