"""FedSPU, FjORD and FedDrop through the real server policy, strategy and ClientApp
(in-process grid): frozen entries, exact uploads, aggregation, early stopping."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord

from fedapp.core import wire
from fedapp.core.aggregate import Contribution
from fedapp.core.config import ConfigError
from fedapp.core.device import load_host_arrays
from fedapp.core.evaluate import evaluate
from fedapp.core.masks import model_param_masks
from fedapp.core.state import DiskStore
from fedapp.data import client_data
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.base import Reply
from fedapp.methods.early_stop import EarlyStopping
from fedapp.methods.fedspu import PERSONAL_MODEL
from fedapp.methods.registry import resolve
from fedapp.methods.tiers import (
    RECORD,
    TierParams,
    active_fraction,
    kept_count,
    leftmost_neurons,
    random_neurons,
)
from fedapp.models import initial_model
from fedapp.server.roster import Roster
from fedapp.server.strategy import MaskedStrategy
from fedapp.sim.run_local import full_config

BASE = {
    "dataset": "digits", "num-clients": 2, "partition": "0,1,2,3,4|5,6,7,8,9", "local-test-fraction": 0.3,
    "mlp-hidden": "16,8", "local-epochs": 1, "batch-size": 16, "lr": 0.1, "fraction-train": 1.0, "state-store": "disk",
}  # fmt: skip


class Federation:
    """Server policy + MaskedStrategy + ClientApp on an in-process grid, driven round by round."""

    def __init__(self, tmp: Path, overrides: dict[str, Any], node_configs: list[dict[str, Any]] | None = None):
        from fedapp.client_app import app

        self.raw = full_config({**BASE, "run-dir": str(tmp), **overrides})
        self.cfg, method, self.params = resolve(self.raw)
        self.grid = LocalGrid(app, self.raw, self.cfg.num_clients, node_configs)
        roster = Roster(self.grid, self.cfg.num_clients)
        roster.discover(5.0)
        nodes, info = roster.nodes, roster.info
        model = initial_model(self.cfg)
        self.w0 = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        self.policy: Any = method.server(self.cfg, self.params, self.w0, info, model)
        self.strategy = MaskedStrategy(self.cfg, self.policy, nodes)
        self.record = wire.to_record(self.w0)
        self.store = DiskStore(tmp / "client-state")

    def train_round(self, rnd: int) -> tuple[list[Any], list[Any]]:
        sent = list(self.strategy.configure_train(rnd, self.record, ConfigRecord(), self.grid))
        replies = list(self.grid.send_and_receive(sent))
        result = self.strategy.aggregate_train(rnd, replies)
        assert result.arrays is not None and result.stats.failures == 0, result.stats.reasons
        self.record = result.arrays
        return sent, replies

    @property
    def global_np(self) -> dict[str, np.ndarray]:
        return wire.from_record(self.record)


def pid_of(msg: Any) -> int:
    return int(msg.content["config"]["partition-id"])


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32)


@pytest.mark.parametrize("optimizer", [{}, {"momentum": 0.9, "weight-decay": 0.01}])
def test_frozen_entries_are_bit_identical_and_active_ones_start_from_global(tmp_path: Path, optimizer: dict[str, Any]) -> None:
    fed = Federation(tmp_path, {"method": "fedspu", "tiers": "0.5", **optimizer})
    rng = np.random.default_rng(7)
    personal = {pid: {k: rng.normal(size=v.shape).astype(v.dtype) for k, v in fed.w0.items()} for pid in (0, 1)}
    for pid, arrays in personal.items():
        fed.store.save(pid, PERSONAL_MODEL, arrays)
    sent, _ = fed.train_round(1)
    for msg in sent:
        pid = pid_of(msg)
        neurons = [np.unpackbits(msg.content[RECORD][n].numpy(), count=w).astype(bool) for n, w in (("1", 16), ("3", 8))]
        assert [int(m.sum()) for m in neurons] == [8, 4]  # floor(0.5 * width)
        active = model_param_masks(initial_model(fed.cfg), neurons)
        after = fed.store.load(pid, PERSONAL_MODEL)
        for k, m in active.items():
            assert np.array_equal(bits(after[k][~m]), bits(personal[pid][k][~m])), k  # frozen: personal, untouched
            assert not np.allclose(after[k][m], personal[pid][k][m])  # active: global values, then trained
        # only w[A_k] went down: the message's masked values are exactly the global entries of A_k
        got = wire.decode(msg.content["arrays"], msg.content["arrays-mask"], fed.w0, 1.0)
        assert {k: int(v.size) for k, v in got.values.items()} == {k: int(m.sum()) for k, m in active.items()}


@pytest.mark.parametrize("transport", ["bits", "seed"])
def test_upload_carries_exactly_the_active_parameters(tmp_path: Path, transport: str) -> None:
    fed = Federation(tmp_path, {"method": "fedspu", "tiers": "0.5,1.0", "mask-transport": transport})
    sent, replies = fed.train_round(1)
    assert (RECORD in sent[0].content.array_records) == (transport == "bits")
    assert ("neuron-seed" in sent[0].content["config"]) == (transport == "seed")
    assert RECORD not in sent[1].content.array_records and "arrays-mask" not in sent[1].content.array_records  # p = 1: dense
    # hand count for 64-16-8-10 at p = 0.5 (8 and 4 kept): 8*64+8 + 4*8+4 + 10*4+10 = 606 floats; p = 1: 1266
    expected_floats = {0: 606, 1: 1266}
    for reply in replies:
        pid = int(reply.content["metrics"]["partition-id"])
        values = {k: a.numpy() for k, a in reply.content["values"].items()}
        assert sum(v.nbytes for v in values.values()) == 4 * expected_floats[pid]
        mask_bytes = sum(a.numpy().nbytes for a in reply.content["mask"].values())
        # p = 0.5, packed bits: 1.weight rows 16 + cols 64 -> 2 + 8; 1.bias 16 -> 2; 3.weight 8 + 16 -> 1 + 2;
        # 3.bias 8 -> 1; 5.weight 10 + 8 -> 2 + 1; 5.bias all active -> dense, no mask. p = 1: no masks at all
        assert mask_bytes == (19 if pid == 0 else 0)
        trained = fed.store.load(pid, PERSONAL_MODEL)
        got = wire.decode(reply.content["values"], reply.content["mask"], fed.w0, 1.0)
        dense = wire.dense_masks(got, fed.w0)
        for k, v in values.items():
            assert np.array_equal(v.reshape(-1), trained[k][dense[k]].reshape(-1))  # the personal model's active entries


@pytest.mark.parametrize("method", ["fedspu", "feddrop"])
def test_seed_and_bit_transport_train_the_same_neurons(tmp_path: Path, method: str) -> None:
    """The random-draw methods: the client's expansion of the seed is the server's draw."""
    runs = {}
    for transport in ("bits", "seed"):
        fed = Federation(tmp_path / transport, {"method": method, "tiers": "0.4", "mask-transport": transport})
        sent, _ = fed.train_round(1)
        assert ("neuron-seed" in sent[0].content["config"]) == (transport == "seed")
        runs[transport] = fed.global_np
    assert any(not np.array_equal(runs["seed"][k], fed.w0[k]) for k in fed.w0)  # it trained
    for k in runs["bits"]:
        assert np.array_equal(runs["bits"][k], runs["seed"][k])


def test_server_averages_each_entry_over_its_contributors_only(tmp_path: Path) -> None:
    fed = Federation(tmp_path, {"method": "fedspu", "tiers": "0.25", "client-weighting": "uniform"})
    _, replies = fed.train_round(1)
    contribs = {
        int(r.content["metrics"]["partition-id"]): wire.decode(r.content["values"], r.content["mask"], fed.w0, 1.0) for r in replies
    }
    new = fed.global_np
    for k, g0 in fed.w0.items():
        m = {p: wire.dense_masks(c, fed.w0)[k] for p, c in contribs.items()}
        v = {p: wire.scatter(c, fed.w0)[k] for p, c in contribs.items()}
        both, only0, only1, none = m[0] & m[1], m[0] & ~m[1], m[1] & ~m[0], ~m[0] & ~m[1]
        np.testing.assert_allclose(new[k][both], (v[0][both] + v[1][both]) / 2, rtol=1e-6)
        assert np.array_equal(new[k][only0], v[0][only0]) and np.array_equal(new[k][only1], v[1][only1])
        assert np.array_equal(new[k][none], g0[none])


def test_personal_evaluation_uses_the_stored_model_or_w0(tmp_path: Path) -> None:
    fed = Federation(tmp_path, {"method": "fedspu", "tiers": "0.5", "fraction-train": 0.5})
    sent, _ = fed.train_round(1)
    trained, untouched = pid_of(sent[0]), 1 - pid_of(sent[0])
    msgs = list(fed.strategy.configure_evaluate(1, fed.record, ConfigRecord(), fed.grid))
    accs = {int(m["partition-id"]): float(m["accuracy"]) for m in (r.content["metrics"] for r in fed.grid.send_and_receive(msgs))}  # type: ignore[arg-type]
    for pid, arrays in ((trained, fed.store.load(trained, PERSONAL_MODEL)), (untouched, fed.w0)):
        model = initial_model(fed.cfg)
        load_host_arrays(model, arrays)
        data = client_data(fed.cfg, pid)
        assert accs[pid] == evaluate(model, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test))[0]
    assert not fed.store.load(untouched, PERSONAL_MODEL)


@pytest.mark.parametrize("method", ["fjord", "feddrop"])
def test_dropout_baselines_upload_their_sub_model_and_leave_the_rest_global(tmp_path: Path, method: str) -> None:
    fed = Federation(tmp_path, {"method": method, "tiers": "0.5"})
    sent, replies = fed.train_round(1)
    for msg, reply in zip(sent, replies, strict=True):
        neurons = [np.unpackbits(msg.content[RECORD][n].numpy(), count=w).astype(bool) for n, w in (("1", 16), ("3", 8))]
        if method == "fjord":
            assert all(np.array_equal(m, np.arange(m.size) < m.size // 2) for m in neurons)
        got = wire.decode(reply.content["values"], reply.content["mask"], fed.w0, 1.0)
        expect = model_param_masks(initial_model(fed.cfg), neurons)
        assert all(np.array_equal(wire.dense_masks(got, fed.w0)[k], m) for k, m in expect.items())
    assert not (method == "fjord" and any(fed.store.path(p).exists() for p in (0, 1)))  # FjORD keeps nothing


# -- early stopping -------------------------------------------------------------------


def test_early_stopping_on_a_hand_made_loss_sequence() -> None:
    es = EarlyStopping([0, 1, 2], per_round=2)
    # client 0 participates at rounds 1, 3, 4, 7, 9: losses 2.0, 1.5, 1.5 (equal: goes on), 1.2, 1.3 (rises: stops)
    seq = [(1, 2.0), (3, 1.5), (4, 1.5), (7, 1.2), (9, 1.3)]
    stops = [es.report(r, 0, loss) for r, loss in seq]
    assert stops == [False, False, False, False, True] and es.stopped == {0: 9}
    assert es.report(11, 0, 5.0) is False and es.stopped == {0: 9}  # stopped for good, never re-stops
    assert es.report(2, 1, 9.0) is False  # a first participation never stops, however large
    rng = random.Random(0)
    assert all(0 not in es.select(r, rng) for r in range(10, 20))  # a stopped client is never sampled
    assert es.first_short_round is None and es.select(20, rng) == [1, 2]
    es.report(21, 1, 10.0), es.report(21, 2, 1.0), es.report(22, 2, 0.5)
    assert es.select(23, rng) == [2] and es.first_short_round == 23  # fewer than K left: take them all
    assert not es.finished()
    es.report(24, 2, 0.6)
    assert es.finished() and es.select(25, rng) == []


def test_early_stopping_compare_option_and_disabled() -> None:
    es = EarlyStopping([0], per_round=1, compare=">=")
    assert [es.report(r, 0, v) for r, v in [(1, 2.0), (2, 1.5), (3, 1.5)]] == [False, False, True]
    off = EarlyStopping([0], per_round=1, enabled=False)
    assert [off.report(r, 0, v) for r, v in [(1, 1.0), (2, 2.0), (3, 3.0)]] == [False, False, False] and not off.finished()


def test_server_policy_counts_active_and_stopped_clients(tmp_path: Path) -> None:
    fed = Federation(tmp_path, {"method": "fedspu", "tiers": "0.5", "early-stopping": True})

    def reply(pid: int, loss: float) -> Reply:
        return Reply(pid, Contribution(1.0, {}), {"es-loss": loss}, {})

    assert fed.policy.after_round(1, [reply(0, 1.0), reply(1, 1.0)])["stopped_clients"] == 0
    row = fed.policy.after_round(2, [reply(0, 0.9), reply(1, 1.1)])
    assert (row["active_clients"], row["stopped_clients"]) == (1, 1) and not fed.policy.finished(2)
    assert fed.policy.select(3, [0, 1], random.Random(0)) == [0]
    assert fed.policy.after_round(3, [reply(0, 0.95)])["active_clients"] == 0 and fed.policy.finished(3)


# -- tiers and neuron selection ------------------------------------------------------


def test_active_fraction_from_node_facts_or_id_clusters() -> None:
    params = TierParams()
    assert [active_fraction(p, {}, params, 20) for p in (0, 3, 4, 7, 8, 19)] == [0.2, 0.2, 0.4, 0.4, 0.6, 1.0]
    assert active_fraction(0, {"tier": 3}, params, 20) == 0.8
    assert active_fraction(0, {"tier": 3, "active-fraction": 0.3}, params, 20) == 0.3
    with pytest.raises(ConfigError, match=r"'tier' = 5 .*0\.\.4"):
        active_fraction(0, {"tier": 5}, params, 20)
    with pytest.raises(ConfigError, match=r"'active-fraction' = 1.5"):
        active_fraction(0, {"active-fraction": 1.5}, params, 20)


def test_node_config_tiers_reach_the_server_through_the_query(tmp_path: Path) -> None:
    fed = Federation(tmp_path, {"method": "fedspu"}, [{"tier": 4}, {"active-fraction": 0.3}])
    assert fed.policy.p == {0: 1.0, 1: 0.3}


def test_kept_counts_and_selection() -> None:
    assert [kept_count(64, p) for p in (0.2, 0.4, 0.6, 0.8, 1.0)] == [12, 25, 38, 51, 64]
    assert [kept_count(64, p, "ceil") for p in (0.2, 0.4, 0.6, 0.8, 1.0)] == [13, 26, 39, 52, 64]
    assert kept_count(3, 0.1) == 1
    a, b = random_neurons((64, 32), 0.4, 5), random_neurons((64, 32), 0.4, 5)
    assert [int(m.sum()) for m in a] == [25, 12] and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], random_neurons((64, 32), 0.4, 6)[0])
    assert [np.flatnonzero(m).tolist() for m in leftmost_neurons((5, 4), 0.6)] == [[0, 1, 2], [0, 1]]


def test_bad_tier_keys_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'tiers' = '0.2,1.5'"):
        resolve(full_config({"method": "fedspu", "tiers": "0.2,1.5"}))
    with pytest.raises(ConfigError, match=r"'es-compare' = '<'"):
        resolve(full_config({"method": "fedspu", "es-compare": "<"}))
