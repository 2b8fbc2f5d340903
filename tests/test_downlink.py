"""``downlink = selected`` end to end on the in-process engine (the ServerApp loop and ClientApp of
`flwr run`): each train message carries only the tensors changed since the node's last model, the
results are bit-identical to ``downlink = full`` (computed by the full path, independently), a node
that missed rounds gets a catch-up named in the row, and every cache fault (missing, stale round,
wrong digest, wrong shape, a node restarted) makes the node refuse its cache before training and
get the full model in the same round. Traffic keys are checked against Flower's own serializer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message
from flwr.common.serde import recorddict_to_proto

from fedapp.client_app import app as client_app
from fedapp.core import wire
from fedapp.core.masks import layer_groups
from fedapp.core.state import ContextStore
from fedapp.data import dataset_for
from fedapp.downlink.cache import ROUND, SLOT
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.server.loop import serve
from fedapp.sim.run_local import full_config
from tests.run_rows import outcome_rows

TINY = {
    "method": "fedpart", "dataset": "digits", "model": "cnn-bn", "partition": "iid", "num-clients": 3,
    "optimizer": "adam", "lr": 0.01, "batch-size": 32, "local-steps": 1, "client-weighting": "uniform",
    "warmup-rounds": 1, "cycles": 1, "rounds-per-layer": 1, "full-rounds-between-cycles": 0, "num-server-rounds": 7,
}  # fmt: skip
TRAFFIC = {
    "bytes_down",
    "wire_bytes_down",
    "wire_bytes_up",
    "wire_bytes_clients",
    "mb_total",
    "downlink",
    "messages",
}  # a resend is a message too
Fault = Callable[[Context, int], None]


class Recording(LocalGrid):
    """LocalGrid that keeps every train message and reply, and applies ``faults[(round, pid)]`` to the
    node's Context just before that round's first train message reaches it."""

    def __init__(self, raw: dict[str, Any], n: int, faults: dict[tuple[int, int], Fault] | None = None):
        super().__init__(client_app, raw, n)
        self.faults = dict(faults or {})
        self.train: list[tuple[Message, Message]] = []

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        for m in messages:
            if m.metadata.message_type == "train":
                rnd, pid = int(m.content["config"]["server-round"]), int(m.content["config"]["partition-id"])  # type: ignore[arg-type]
                fault = self.faults.pop((rnd, pid), None)
                if fault is not None:
                    fault(self.contexts[m.metadata.dst_node_id], pid)
        replies = list(super().send_and_receive(messages, timeout=timeout))
        self.train += [(m, r) for m, r in zip(messages, replies, strict=True) if m.metadata.message_type == "train"]
        return replies

    def messages_of(self, rnd: int) -> list[tuple[int, Message, Message]]:
        return [(int(m.content["config"]["partition-id"]), m, r) for m, r in self.train if m.content["config"]["server-round"] == rnd]  # type: ignore[arg-type]


def run(tmp: Path, name: str, faults: dict[tuple[int, int], Fault] | None = None, **over: Any) -> tuple[Path, Recording]:
    raw = full_config({**TINY, **over, "run-dir": str(tmp / name)})
    grid = Recording(raw, int(raw["num-clients"]), faults)
    return serve(grid, raw, discovery_timeout=5.0), grid


def same_results(a: Path, b: Path, skip: frozenset[str] = frozenset()) -> None:
    """Every non-traffic, non-timing key of every row (but ``skip``), and the saved model, bit-identical."""
    rows_a, rows_b = ([{k: v for k, v in r.items() if k not in TRAFFIC | skip} for r in outcome_rows(p)] for p in (a, b))
    assert rows_a == rows_b
    with np.load(a / "model.npz") as ma, np.load(b / "model.npz") as mb:
        assert ma.files == mb.files and all(np.array_equal(ma[k], mb[k]) for k in ma.files)


def rows_of(p: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (p / "metrics.jsonl").read_text().splitlines()]


def cache_edit(edit: Callable[[dict[str, np.ndarray]], None]) -> Fault:
    def fault(ctx: Context, pid: int) -> None:
        store = ContextStore(ctx)
        entries = store.read(pid, SLOT)
        if entries:  # the full-downlink run keeps no cache: nothing to break there
            edit(entries)
            store.write(pid, SLOT, entries)

    return fault


def missing(ctx: Context, pid: int) -> None:
    ContextStore(ctx).drop(pid, SLOT)


def restarted(ctx: Context, pid: int) -> None:
    """A SuperNode restart with an in-memory store: every state record is gone (also the method's own)."""
    for name in list(ctx.state.keys()):
        del ctx.state[name]


def stale(entries: dict[str, np.ndarray]) -> None:
    entries[ROUND] = entries[ROUND] - 1


def wrong_digest(entries: dict[str, np.ndarray]) -> None:
    entries["model/1.running_var"] = entries["model/1.running_var"] + 1.0  # a BN buffer: never resent, so only the digest sees it


def wrong_shape(entries: dict[str, np.ndarray]) -> None:
    entries["model/0.weight"] = entries["model/0.weight"].reshape(-1)


FAULTS: dict[tuple[int, int], Fault] = {
    (3, 0): missing, (3, 1): cache_edit(wrong_digest), (4, 2): cache_edit(stale), (5, 0): cache_edit(wrong_shape), (6, 1): restarted,
}  # fmt: skip
EXPECTED_MISS = {3: {"0": "missing", "1": "wrong digest"}, 4: {"2": "stale round"}, 5: {"0": "wrong shape"}, 6: {"1": "missing"}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Recording]]:
    """The same faults hit both runs; in the full-downlink run only the restart matters (it keeps no cache)."""
    tmp = tmp_path_factory.mktemp("downlink")
    return {"full": run(tmp, "full", dict(FAULTS)), "faults": run(tmp, "faults", dict(FAULTS), downlink="selected")}


def groups_of() -> tuple[list[str], list[list[str]]]:
    cfg = resolve(full_config(TINY))[0]
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=0)
    return [n for n, _ in model.named_parameters()], [list(g.params) for g in layer_groups(model)]


def test_selected_sends_only_what_changed_since_the_nodes_last_model(runs: dict[str, tuple[Path, Recording]]) -> None:
    (_, full_grid), (sel, grid) = runs["full"], runs["faults"]
    params, groups = groups_of()
    rows = rows_of(sel)
    everything = set(full_grid.train[0][0].content["arrays"].keys())  # type: ignore[union-attr]
    for r in rows:
        first = {p: m for p, m, _ in reversed(grid.messages_of(r["round"]))}  # each node's first message of the round
        if r["round"] == 1:
            want = everything
            assert r["downlink"]["full"] == {str(p): "no model sent yet" for p in range(3)}
        else:  # what the previous round's aggregate changed: its group (all parameters after a full round), never a BN buffer
            prev = rows[r["round"] - 2]["trained_group"]
            want = set(params) if prev == -1 else set(groups[prev])
            assert r["downlink"]["full"] == {} and r["downlink"]["catch_up"] == {}
        assert [set(first[p].content["arrays"].keys()) for p in range(3)] == [want] * 3, r["round"]  # type: ignore[union-attr]


def test_wire_bytes_are_flowers_serialized_sizes(runs: dict[str, tuple[Path, Recording]]) -> None:
    for name in runs:
        path, grid = runs[name]
        for r in rows_of(path):
            msgs = grid.messages_of(r["round"])
            down = {str(p): 0 for p, _, _ in msgs}
            up = dict(down)
            for p, m, reply in msgs:
                down[str(p)] += recorddict_to_proto(m.content).ByteSize()
                up[str(p)] += recorddict_to_proto(reply.content).ByteSize()
            assert r["wire_bytes_clients"] == {p: [down[p], up[p]] for p in down}, (name, r["round"])
            assert r["wire_bytes_down"] == sum(down.values()) and r["wire_bytes_up"] == sum(up.values())
            assert r["mb_total"] == (r["wire_bytes_down"] + r["wire_bytes_up"]) / 1e6


def test_every_cache_fault_gets_the_full_model_and_nothing_trains_on_the_bad_cache(runs: dict[str, tuple[Path, Recording]]) -> None:
    (full, _), (faulty, grid) = runs["full"], runs["faults"]
    same_results(full, faulty)  # selected computes exactly what full does, cache faults and all
    for r in rows_of(faulty):
        assert r["downlink"]["cache_miss"] == EXPECTED_MISS.get(r["round"], {}), r["round"]
        assert r["failures"] == 0 and r["clients"] == 3
        for pid in EXPECTED_MISS.get(r["round"], {}):
            first, second = [(m, rep) for p, m, rep in grid.messages_of(r["round"]) if p == int(pid)]
            assert int(first[0].content["config"]["downlink-base"]) == r["round"] - 1  # type: ignore[arg-type]
            assert "values" not in first[1].content.array_records  # refused before training: no update came back
            assert int(second[0].content["config"]["downlink-base"]) == 0  # type: ignore[arg-type]
            assert len(second[0].content["arrays"]) == len(grid.train[0][0].content["arrays"])  # type: ignore[arg-type]
            assert "values" in second[1].content.array_records


def test_fraction_train_half_names_catch_ups_and_matches_full(tmp_path: Path) -> None:
    over: dict[str, Any] = {
        "num-clients": 4,
        "fraction-train": 0.5,
        "state-store": "disk",
    }  # the SuperNode store: one .npz per client and slot
    (full, full_grid), (sel, _) = run(tmp_path, "full", **over), run(tmp_path, "sel", downlink="selected", **over)
    same_results(full, sel)
    models = {r: wire.from_record(full_grid.messages_of(r)[0][1].content["arrays"]) for r in range(1, 8)}  # type: ignore[arg-type]
    last: dict[int, int] = {}
    caught = 0
    for r in rows_of(sel):
        want = {}
        for pid, _, _ in full_grid.messages_of(r["round"]):
            if pid in last and last[pid] < r["round"] - 1:  # missed a round: every tensor changed since its last model
                old, now = models[last[pid]], models[r["round"]]
                want[str(pid)] = [last[pid], sum(not np.array_equal(old[n], now[n]) for n in now)]
            last[pid] = r["round"]
        assert r["downlink"]["catch_up"] == want and r["downlink"]["cache_miss"] == {}, r["round"]
        caught += len(want)
    assert caught > 0  # the draw did make nodes miss rounds
    assert list((Path(sel) / "client-state").rglob(f"client-*.{SLOT}.npz"))


def test_batched_engine_selected_matches_batched_full(tmp_path: Path) -> None:
    """``client-batch`` 8: the round's messages, partial or full, and a cache-miss resend (a second
    exchange in the round) all go through the batched executor, and change nothing."""
    over: dict[str, Any] = {"client-batch": "8"}
    faults: dict[tuple[int, int], Fault] = {(3, 0): missing}
    (full, _), (sel, grid) = run(tmp_path, "full", dict(faults), **over), run(tmp_path, "sel", dict(faults), downlink="selected", **over)
    same_results(full, sel, frozenset({"client_batch"}))
    for r in rows_of(sel):
        batched = r["client_batch"]
        if r["round"] != 3:
            assert batched["chunks"] == [3] and batched["one_at_a_time"] == {}, r["round"]  # all trained in one chunk
        else:  # partition 0 refused its cache before training, then trained alone in the resend's wave
            assert batched["chunks"] == [2, 1] and sum(batched["one_at_a_time"].values()) == 1
        assert r["downlink"]["cache_miss"] == ({"0": "missing"} if r["round"] == 3 else {}), r["round"]
    group = groups_of()[1][rows_of(sel)[1]["trained_group"]]  # what round 2 changed
    everything = len(grid.train[0][0].content["arrays"])  # type: ignore[arg-type]
    assert [len(m.content["arrays"]) for p, m, _ in grid.messages_of(3) if p == 0] == [len(group), everything]  # type: ignore[arg-type]
