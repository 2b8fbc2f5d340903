"""Client state survives a SuperNode-style restart (disk store), and is lost without it.

A restart is modelled as Flower sees it: the node's Context (and its ``state``) is
replaced by a fresh one between rounds, while the real ClientApp keeps handling
messages. Two federations run side by side from the same seed, one restarted after
round 2; with ``state-store = "disk"`` they must stay identical coordinate for
coordinate, while with the Context store the restarted one forgets its masks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, RecordDict

from fedapp.client_app import app as client_app
from fedapp.core import wire
from fedapp.core.state import DiskStore
from fedapp.data import dataset_for
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.personal import MASK_CURRENT, MASK_NEXT, SAVED_ROUND, THETA
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.server.strategy import MaskedStrategy
from fedapp.sim.run_local import full_config

N, ROUNDS, RESTART_AFTER = 3, 3, 2


def whole(store: DiskStore, pid: int) -> dict[str, np.ndarray]:
    """Every record FedSelect keeps for ``pid``, as one dict."""
    return {f"{key}/{n}": a for key in (THETA, MASK_CURRENT, MASK_NEXT, SAVED_ROUND) for n, a in store.load(pid, key).items()}


def federation(tmp: Path, name: str, store: str, restart: bool) -> dict[str, object]:
    state_dir = tmp / name / "state"
    raw = full_config(
        {
            "method": "fedselect", "num-clients": N, "partition": "0,1,2|3,4,5|6,7,8,9", "local-test-fraction": 0.5,
            "local-alt-epochs": 1, "batch-size": 16, "state-store": store, "run-dir": str(tmp / name),
        }
    )  # fmt: skip
    cfg, method, params = resolve(raw)
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed)
    arrays = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    grid = LocalGrid(client_app, raw, N, [{"state-dir": str(state_dir)} for _ in range(N)])
    strategy = MaskedStrategy(cfg, method.server(cfg, params, arrays, {}, model), {p: 1000 + p for p in range(N)})
    record = wire.to_record(arrays)
    out: dict[str, object] = {"masks": []}
    for rnd in range(1, ROUNDS + 1):
        replies = list(grid.send_and_receive(strategy.configure_train(rnd, record, ConfigRecord(), grid)))
        assert all(not r.has_error() for r in replies)
        masked = {int(r.content["metrics"]["partition-id"]): len(r.content["mask"]) > 0 for r in replies}  # type: ignore[arg-type]
        out["masks"].append(masked)  # type: ignore[attr-defined]
        new, _ = strategy.aggregate_train(rnd, replies)
        assert new is not None
        record = new
        if rnd == RESTART_AFTER:
            before = [whole(DiskStore(state_dir), p) for p in range(N)] if store == "disk" else None
            if restart:  # stop every client: fresh Context, empty state, same node config
                grid.contexts = {
                    nid: Context(1, nid, dict(c.node_config), RecordDict(), dict(c.run_config)) for nid, c in grid.contexts.items()
                }
            eval_msgs = list(strategy.configure_evaluate(rnd, record, ConfigRecord(), grid))
            out["eval"] = dict(strategy.aggregate_evaluate(rnd, grid.send_and_receive(eval_msgs)).stats)
            if before is not None:
                out["survived"] = all(
                    set(b) == set(a := whole(DiskStore(state_dir), p)) and all(np.array_equal(b[k], a[k]) for k in b)
                    for p, b in enumerate(before)
                )
    out["global"] = wire.from_record(record)
    out["state"] = [whole(DiskStore(state_dir), p) for p in range(N)] if store == "disk" else None
    return out


def test_disk_state_survives_a_restart_between_rounds(tmp_path: Path) -> None:
    steady = federation(tmp_path, "steady", "disk", restart=False)
    restarted = federation(tmp_path, "restarted", "disk", restart=True)
    assert restarted["survived"] is True
    assert restarted["eval"] == steady["eval"] and steady["eval"]["evaluated_clients"] == N  # type: ignore[index]
    for a, b in zip(steady["state"], restarted["state"], strict=True):  # type: ignore[call-overload]
        assert set(a) == set(b) and any(k.startswith(MASK_CURRENT + "/") for k in a)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # masks (packed bits), θ_k, BN buffers, round
    for k, v in steady["global"].items():  # type: ignore[attr-defined]
        np.testing.assert_array_equal(v, restarted["global"][k])  # type: ignore[index]
    assert all(all(m.values()) for m in steady["masks"][1:])  # type: ignore[index]  # masked uploads from round 2


def test_context_state_is_lost_on_restart_so_the_check_can_fail(tmp_path: Path) -> None:
    steady = federation(tmp_path, "steady", "context", restart=False)
    restarted = federation(tmp_path, "restarted", "context", restart=True)
    assert steady["masks"] == [{p: r > 1 for p in range(N)} for r in range(1, ROUNDS + 1)]
    # after the restart every client has lost θ_k and its masks; the server sent only each one's global
    # part, so what was personal stays personal (restarted from w0) and round 3 uploads stay masked
    assert restarted["masks"][RESTART_AFTER] == {p: True for p in range(N)}  # type: ignore[index]
    assert restarted["eval"] != steady["eval"]
    with pytest.raises(AssertionError):
        for k, v in steady["global"].items():  # type: ignore[attr-defined]
            np.testing.assert_array_equal(v, restarted["global"][k])  # type: ignore[index]
