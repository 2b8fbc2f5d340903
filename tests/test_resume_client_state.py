"""A FedSelect run killed with SIGKILL in the middle of a round and resumed is the run it
continues, bit for bit: metrics rows, model, and every client's stored state (both versions),
with the disk store and with the in-process engine's Context store.

The kill comes at the third train message of round 3 (tests/kill_mid_round.py), so two clients
have already saved their round-3 state when the process dies; the resumed run redoes round 3
from the round-2 checkpoint and those two clients must train from their round-2 state again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from fedapp.core.state import ContextStore, DiskStore
from fedapp.core.state_rounds import ATTEMPT, PREV, Lineage, RoundStore, stamp
from fedapp.server import checkpoint
from fedapp.sim.run_local import run_local
from tests.run_rows import WIRE, outcome_rows

N, ROUNDS, KILL_ROUND, KILL_AT = 5, 4, 3, 3
BASE = {
    "method": "fedselect", "dataset": "digits", "partition": "shard", "num-clients": N, "classes-per-client": 2,
    "samples-per-client": 10, "local-test-source": "own-data", "mlp-hidden": "32,32", "local-alt-epochs": 1,
    "batch-size": 10, "lr": 0.05, "personal-rate": 0.25, "personal-limit": 0.3, "personalized-eval": True,
    "fraction-train": 0.6, "num-server-rounds": ROUNDS,
}  # fmt: skip


def client_state(run: Path) -> dict[str, dict[str, np.ndarray]]:
    """Every slot of every client (file name -> entries), without the attempt stamp (a resumed run's own id)."""
    folder = checkpoint.client_state_dir(run)
    store = DiskStore(folder)
    out = {}
    for pid in range(N):
        for slot in ("", PREV):
            entries = store.read(pid, slot)
            if entries:
                out[store.path(pid, slot).name] = {k: v for k, v in entries.items() if k != ATTEMPT}
    return out


@pytest.mark.parametrize("store", ["disk", "context"])
def test_a_run_killed_mid_round_resumes_with_every_clients_state(tmp_path: Path, store: str) -> None:
    cfg = {**BASE, "state-store": store}
    straight = run_local({**cfg, "run-dir": str(tmp_path / "straight")})
    cut = tmp_path / "cut"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    args = [sys.executable, "-m", "tests.kill_mid_round", json.dumps({**cfg, "run-dir": str(cut)}), str(KILL_ROUND), str(KILL_AT)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert checkpoint.load(cut).round == KILL_ROUND - 1  # type: ignore[union-attr]
    if store == "disk":  # the clients trained before the kill hold a round-3 version that must not be used
        killed = client_state(cut)
        assert sum(stamp(e)[0] == KILL_ROUND for name, e in killed.items() if ".prev" not in name) == KILL_AT - 1
    run_local({**cfg, "resume": True, "run-dir": str(cut)})
    rows = outcome_rows(cut, WIRE)
    assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1))
    assert rows == outcome_rows(straight, WIRE)
    assert rows[-1]["evaluated_clients"] == N and rows[-1]["personal_fraction"] > 0
    a, b = np.load(straight / "model.npz"), np.load(cut / "model.npz")
    assert a.files == b.files
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    want, got = client_state(straight), client_state(cut)
    assert sorted(want) == sorted(got) and len(want) > N  # every client, and previous versions kept
    for name, entries in want.items():
        assert sorted(entries) == sorted(got[name]), name
        for k, v in entries.items():
            np.testing.assert_array_equal(v, got[name][k], err_msg=f"{name} {k}")
    assert {stamp(e)[0] for e in got.values()} >= {KILL_ROUND, ROUNDS}  # versions of the redone round survive as such


@pytest.mark.parametrize("make", ["disk", "context"])
def test_a_version_an_interrupted_start_saved_is_ignored_even_where_the_redo_skips_that_client(tmp_path: Path, make: str) -> None:
    """Versions by hand: rounds 1-3 saved by the first start (killed in round 3, checkpoint 2),
    the resumed start ("ab", from round 3) first trains this client in round 4."""
    slots = DiskStore(tmp_path) if make == "disk" else ContextStore(Context(1, 7, {"partition-id": 0}, RecordDict(), {}))
    for rnd in (1, 2, 3):
        RoundStore(slots, rnd, Lineage()).save(0, "w", {"v": np.array([rnd])})
    resumed = Lineage.parse("1:,3:ab")
    r4 = RoundStore(slots, 4, resumed)
    assert r4.load(0, "w")["v"].tolist() == [2]  # not the killed start's round 3
    r4.save(0, "w", {"v": np.array([4])})
    assert stamp(slots.read(0)) == (4, "ab") and stamp(slots.read(0, PREV)) == (2, "")
    assert RoundStore(slots, 5, Lineage.parse("1:,3:ab,5:cd")).load(0, "w")["v"].tolist() == [4]  # a second resume
    for bad in ("x", "1:,1:ab", "1:,3:AB", "3:ab,1:"):
        with pytest.raises(ValueError, match="state-lineage"):
            Lineage.parse(bad)
