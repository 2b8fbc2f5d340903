"""Probes of a malicious or broken node, and of run-configs that must never pass.

Every reply probe is a real Flower message from the real ClientApp, altered on its way out by
a wrapper (what a compromised node would send), through the real server loop, roster and
MaskedStrategy on the in-process grid. Each one crashed the ServerApp, poisoned or froze the
global model, or was silently accepted before these checks; docs/faults.md lists them all.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedapp.client.handlers import handle_evaluate, handle_train, state_store
from fedapp.client.node_query import handle_query
from fedapp.core import score_keys, wire
from fedapp.core.config import ConfigError, RunConfig, load_toml_config
from fedapp.core.state import DiskStore
from fedapp.data import client_data, dataset_for
from fedapp.data.sizes import split_sizes
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.base import ServerPolicy
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.server.loop import serve
from fedapp.server.roster import Roster
from fedapp.sim.run_local import full_config

BASE = {
    "dataset": "digits", "num-clients": 3, "partition": "0,1,2,3|4,5,6|7,8,9", "num-server-rounds": 2,
    "local-steps": 4, "batch-size": 16, "lr": 0.3, "mlp-hidden": "32",
}  # fmt: skip
BAD = 1  # the malicious partition
ROGUE = 1003  # node id of a fourth, rogue node

Tamper = Callable[[Message], Message]


def pid_of(context: Context) -> int:
    return int(context.node_config["partition-id"])  # type: ignore[arg-type]


def malicious_app(
    train: Tamper | None = None, evaluate: Tamper | None = None, query: Tamper | None = None, who: Callable[[Context], bool] | None = None
) -> ClientApp:
    """The real ClientApp; the node ``who`` picks (default: partition BAD) alters its replies."""
    bad = who or (lambda ctx: pid_of(ctx) == BAD and ctx.node_id != ROGUE)
    app = ClientApp()

    @app.train()
    def _train(msg: Message, context: Context) -> Message:
        reply = handle_train(msg, context)
        return train(reply) if train and bad(context) else reply

    @app.evaluate()
    def _evaluate(msg: Message, context: Context) -> Message:
        reply = handle_evaluate(msg, context)
        return evaluate(reply) if evaluate and bad(context) else reply

    @app.query()
    def _query(msg: Message, context: Context) -> Message:
        return query(msg) if query and bad(context) else handle_query(msg, context)

    return app


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run(
    tmp_path: Path, app: ClientApp, over: dict[str, Any] | None = None, grid_cls: type[LocalGrid] = LocalGrid, nodes: int = 3
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """A whole federation on the in-process grid; nodes beyond the third claim partition 0."""
    raw = full_config({**BASE, "run-dir": str(tmp_path / "run"), **(over or {})})
    configs: list[dict[str, Any]] = [{"num-partitions": 3} for _ in range(3)]
    configs += [{"partition-id": 0, "num-partitions": 3} for _ in range(nodes - 3)]
    out = serve(grid_cls(app, raw, nodes, configs), raw, discovery_timeout=5)
    with np.load(out / "model.npz") as model:
        return rows(out), {k: model[k] for k in model.files}


def initial_model(**over: Any) -> dict[str, np.ndarray]:
    cfg = resolve(full_config({**BASE, **over}))[0]
    ds = dataset_for(cfg)
    return {k: v.numpy() for k, v in build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed).state_dict().items()}


def assert_node_failed_and_model_moved(out: list[dict[str, Any]], model: dict[str, np.ndarray], reason: str) -> None:
    """Every round: the bad node is the one failure (its reason recorded), the others are averaged,
    and the global model is finite and has moved away from the initial one (not frozen)."""
    for r in out:
        assert (r["clients"], r["failures"], r["failed_pids"]) == (2, 1, [BAD]), r
        assert any(reason in f for f in r["failure_reasons"]), r["failure_reasons"]
        assert np.isfinite(r["accuracy"])
    start = initial_model()
    assert all(np.isfinite(v).all() for v in model.values())
    assert all(not np.array_equal(model[k], start[k]) for k in start)
    assert max(float(np.abs(v).max()) for v in model.values()) < 10.0


# -- train replies -------------------------------------------------------------------------------


def set_metric(key: str, value: Any) -> Tamper:
    def tamper(reply: Message) -> Message:
        reply.content.metric_records["metrics"][key] = value
        return reply

    return tamper


def fill_values(value: float, num_examples: float | None = None) -> Tamper:
    def tamper(reply: Message) -> Message:
        values = reply.content.array_records["values"]
        for name in list(values):
            values[name] = Array(np.full(values[name].numpy().shape, value, np.float32))
        if num_examples is not None:
            reply.content.metric_records["metrics"]["num-examples"] = num_examples
        return reply

    return tamper


def swap_record(name: str, record: Any) -> Tamper:
    def tamper(reply: Message) -> Message:
        reply.content[name] = record
        return reply

    return tamper


def drop_record(name: str) -> Tamper:
    def tamper(reply: Message) -> Message:
        del reply.content[name]
        return reply

    return tamper


def oversize_values(reply: Message) -> Message:
    values = reply.content.array_records["values"]
    name = next(iter(values))
    values[name] = Array(np.zeros(values[name].numpy().size * 50, np.float32))
    return reply


TRAIN_PROBES: dict[str, tuple[Tamper, str]] = {
    "num-examples=inf": (set_metric("num-examples", float("inf")), "num-examples = inf"),
    "num-examples=nan": (set_metric("num-examples", float("nan")), "num-examples = nan"),
    "num-examples=0": (set_metric("num-examples", 0.0), "num-examples = 0 is"),
    "num-examples=-5": (set_metric("num-examples", -5.0), "num-examples = -5 is"),
    "num-examples=1e30": (set_metric("num-examples", 1e30), "num-examples = 1e+30"),
    "num-examples=partition+1": (set_metric("num-examples", 10_000.0), "num-examples = 10000 is"),
    "num-examples=1e12, values zero": (fill_values(0.0, 1e12), "num-examples = 1e+12"),
    "values=1e30": (fill_values(1e30), "moves by 1e+30"),
    "values as a ConfigRecord": (swap_record("values", ConfigRecord({"x": 1})), "record 'values' is a ConfigRecord"),
    "no metrics": (drop_record("metrics"), "no 'metrics' MetricRecord"),
    "metrics as a ConfigRecord": (
        swap_record("metrics", ConfigRecord({"num-examples": 5})),
        "no 'metrics' MetricRecord (got ConfigRecord)",
    ),
    "metric as a list": (set_metric("train-loss", [1.0] * 3), "metric 'train-loss' is a list"),
    "claims partition 0": (set_metric("partition-id", 0), "claims partition-id 0, but node 1001 was sent the task of partition 1"),
    "unknown 8 MB record": (swap_record("junk", ArrayRecord({"x": Array(np.ones(2_000_000, np.float32))})), "unknown record 'junk'"),
    "values 50x too large": (oversize_values, "more than the"),
}


@pytest.mark.parametrize("probe", sorted(TRAIN_PROBES))
def test_a_bad_train_reply_is_that_nodes_failure_and_the_model_stays_sound(tmp_path: Path, probe: str) -> None:
    tamper, reason = TRAIN_PROBES[probe]
    out, model = run(tmp_path, malicious_app(train=tamper))
    assert_node_failed_and_model_moved(out, model, reason)


def test_the_sample_count_bound_is_the_partitions_own_size(tmp_path: Path) -> None:
    """Exactly the partition's training size passes, one more fails (sizes from the deterministic split)."""
    cfg = resolve(full_config(BASE))[0]
    size = split_sizes(cfg)[BAD].train
    assert size == client_data(cfg, BAD).y_train.size
    out, _ = run(tmp_path / "a", malicious_app(train=set_metric("num-examples", float(size))))
    assert [r["failures"] for r in out] == [0, 0]
    out, _ = run(tmp_path / "b", malicious_app(train=set_metric("num-examples", float(size + 1))))
    assert [r["failed_pids"] for r in out] == [[BAD], [BAD]]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@pytest.mark.parametrize(
    "over",
    [
        {"partition": "dirichlet", "local-test-fraction": 0.3},
        {"partition": "iid", "num-clients": 4},
        {"partition": "shard", "num-clients": 5, "samples-per-client": 20},
        {"partition": "shard", "num-clients": 5, "local-test-source": "test-set"},
        {"partition": "shard", "num-clients": 5, "local-test-fraction": 0.2},
        {"method": "fedselect", "partition": "dirichlet"},  # a personalised method with the default local test split
    ],
)
def test_the_servers_split_sizes_are_the_clients_own(over: dict[str, Any]) -> None:
    cfg = resolve(full_config({"dataset": "digits", **over}))[0]
    for pid, size in enumerate(split_sizes(cfg)):
        data = client_data(cfg, pid)
        assert (size.train, size.test) == (data.y_train.size, data.y_test.size) and size.train > 0


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_a_non_finite_aggregate_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server step of 1e300 (finite; a method's own server_lr, as run-config's server-lr stops at 100) overflows
    float32: the round is rejected, counted, the model kept."""
    monkeypatch.setattr(ServerPolicy, "server_lr", lambda self, server_round: 1e300)
    out, model = run(tmp_path, malicious_app())
    assert [r.get("aggregate_rejected") for r in out] == [1, 1]
    assert all("aggregate rejected" in r["failure_reasons"][0] for r in out)
    start = initial_model()
    assert all(np.array_equal(model[k], start[k]) for k in start)


def failing_bookkeeping(self: ServerPolicy, server_round: int, replies: list[Any]) -> dict[str, Any]:
    raise KeyError("pews-probs")


def test_a_method_bookkeeping_error_keeps_the_round_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ServerPolicy, "after_round", failing_bookkeeping)
    out, _ = run(tmp_path, malicious_app())
    assert [r["clients"] for r in out] == [3, 3]
    assert all("method bookkeeping failed (KeyError" in r["failure_reasons"][0] for r in out)


PEWS = {"method": "fedpews", "warmup-fraction": 1.0, "diversity-ref": "probs"}


def pews_probs(change: Callable[[ArrayRecord], None]) -> Tamper:
    def tamper(reply: Message) -> Message:
        change(reply.content.array_records["pews-probs"])
        return reply

    return tamper


def drop_layer(rec: ArrayRecord) -> None:
    del rec[next(iter(rec))]


def nan_layer(rec: ArrayRecord) -> None:
    name = next(iter(rec))
    rec[name] = Array(np.full(rec[name].numpy().shape, np.nan, np.float32))


def long_layer(rec: ArrayRecord) -> None:
    name = next(iter(rec))
    rec[name] = Array(np.zeros(rec[name].numpy().size + 1, np.float32))


@pytest.mark.parametrize(
    ("change", "reason"), [(drop_layer, "pews-probs: arrays"), (nan_layer, "non-finite"), (long_layer, "expected float32")]
)
def test_a_malformed_fedpews_record_is_that_nodes_failure(tmp_path: Path, change: Callable[[ArrayRecord], None], reason: str) -> None:
    out, _ = run(tmp_path, malicious_app(train=pews_probs(change)), PEWS)
    for r in out:
        assert (r["failures"], r["failed_pids"], r["warmup"]) == (1, [BAD], True)
        assert any(reason in f for f in r["failure_reasons"]), r["failure_reasons"]


# -- evaluate replies ----------------------------------------------------------------------------

PERSONAL = {"personalized-eval": True, "local-test-fraction": 0.3}


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (drop_record("metrics"), "no 'metrics' MetricRecord"),
        (set_metric("accuracy", 7.0), "accuracy = 7.0"),
        (set_metric("accuracy", float("nan")), "accuracy = nan"),
        (set_metric("num-examples", 1e9), "num-examples = 1e+09"),
        (set_metric("partition-id", 2), "claims partition-id 2"),
        (swap_record("extra", ArrayRecord({"x": Array(np.ones(10, np.float32))})), "unknown record 'extra'"),
    ],
)
def test_a_bad_evaluate_reply_is_that_nodes_failure(tmp_path: Path, tamper: Tamper, reason: str) -> None:
    """Round 1's scores travel in round 2's train replies (honest here); the last round's in the closing evaluate's replies."""
    out, _ = run(tmp_path, malicious_app(evaluate=tamper), PERSONAL)
    first, last = out
    assert (first["failures"], first["evaluated_clients"], "eval_failures" in first) == (0, 3, False)
    assert (last["failures"], last["eval_failures"], last["evaluated_clients"]) == (0, 1, 2)
    assert any(reason in f for f in last["failure_reasons"]), last["failure_reasons"]
    assert 0.0 <= last["personalized_accuracy"] <= 1.0


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("accuracy", 7.0, "accuracy = 7.0"),
        ("accuracy", float("nan"), "accuracy = nan"),
        ("num-examples", 1e9, "num-examples = 1e+09"),
        ("partition-id", 2, "claims partition-id 2"),
    ],
)
def test_a_bad_score_in_a_train_reply_is_that_nodes_evaluation_failure(tmp_path: Path, key: str, value: float, reason: str) -> None:
    """A score a train reply carries is checked as an evaluate reply is: dropped alone, the training still averaged."""
    out, _ = run(tmp_path, malicious_app(train=set_metric(score_keys.PREFIX[score_keys.BEFORE] + key, value)), PERSONAL)
    first, last = out
    assert (first["failures"], first["eval_failures"], first["evaluated_clients"]) == (0, 1, 2)
    assert any(reason in f and "evaluation dropped" in f for f in first["failure_reasons"]), first["failure_reasons"]
    assert (last["clients"], last["failures"], last["evaluated_clients"]) == (3, 0, 3)


# -- discovery answers and rogue nodes -------------------------------------------------------------


def no_info(msg: Message) -> Message:
    return Message(RecordDict(), reply_to=msg)


def info(**facts: Any) -> Tamper:
    return lambda msg: Message(RecordDict({"info": ConfigRecord(facts)}), reply_to=msg)


def info_as_metrics(msg: Message) -> Message:
    return Message(RecordDict({"info": MetricRecord({"partition-id": 0})}), reply_to=msg)


class JoiningGrid(LocalGrid):
    """The rogue node comes online after round 1's training (it is asked at the refresh before round 2)."""

    trained = False

    def get_node_ids(self) -> Iterable[int]:
        return [n for n in self.contexts if n != ROGUE or self.trained]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        self.trained |= any(m.metadata.message_type == MessageType.TRAIN for m in messages)
        self.sent_to = getattr(self, "sent_to", []) + [(m.metadata.message_type, m.metadata.dst_node_id) for m in messages]
        return super().send_and_receive(messages, timeout=timeout)


def is_rogue(ctx: Context) -> bool:
    return ctx.node_id == ROGUE


QUERY_PROBES = {"no info": no_info, "partition-id='zero'": info(**{"partition-id": "zero"}), "info as metrics": info_as_metrics}


@pytest.mark.parametrize("grid_cls", [LocalGrid, JoiningGrid], ids=["at discovery", "mid-run"])
@pytest.mark.parametrize("probe", sorted(QUERY_PROBES))
def test_a_malformed_discovery_answer_keeps_that_node_out(tmp_path: Path, probe: str, grid_cls: type[LocalGrid]) -> None:
    out, _ = run(tmp_path, malicious_app(query=QUERY_PROBES[probe], who=is_rogue), grid_cls=grid_cls, nodes=4)
    assert [(r["clients"], r["failures"]) for r in out] == [(3, 0), (3, 0)]
    named = [[x.split(" (")[0] for x in r.get("roster_refused", [])] for r in out]  # the reason, without its details
    once = ["node 1003: discovery answer unusable"]  # in the row of the round whose discovery or refresh asked it
    assert named == ([once, []] if grid_cls is LocalGrid else [[], once])


@pytest.mark.parametrize("mid_run", [False, True], ids=["at discovery", "mid-run"])
def test_a_partition_whose_node_is_online_cannot_be_claimed(tmp_path: Path, mid_run: bool) -> None:
    """A fourth node configured as partition 0 (a rogue, or a clone) never gets partition 0's tasks."""
    raw = full_config({**BASE, "run-dir": str(tmp_path / "run")})
    grid = JoiningGrid(malicious_app(), raw, 4, [{"num-partitions": 3}] * 3 + [{"partition-id": 0, "num-partitions": 3}])
    grid.trained = not mid_run  # online from the start, or only after round 1's training
    out = rows(serve(grid, raw, discovery_timeout=5))
    assert [(r["clients"], r["failures"]) for r in out] == [(3, 0), (3, 0)]
    assert (MessageType.TRAIN, ROGUE) not in grid.sent_to
    assert (MessageType.QUERY, ROGUE) in grid.sent_to
    refused = ["node 1003: claims partition-id 0, which online node 1000 serves"]  # asked again at each refresh
    assert [r.get("roster_refused") for r in out] == ([None] if mid_run else [refused]) + [refused]


def test_an_offline_nodes_partition_goes_to_the_node_that_claims_it_next(tmp_path: Path) -> None:
    from fedapp.client_app import app

    raw = full_config({**BASE, "run-dir": str(tmp_path)})
    grid = LocalGrid(app, raw, 4, [{"num-partitions": 3}] * 3 + [{"partition-id": 0, "num-partitions": 3}])
    roster = Roster(grid, 3)
    roster.discover(5)
    assert roster.nodes == {0: 1000, 1: 1001, 2: 1002}
    del grid.contexts[1000]  # partition 0's node goes offline: the other claimant, asked again, takes over
    assert roster.refresh(5) == {0: ROGUE, 1: 1001, 2: 1002}


def test_a_meter_error_mid_run_keeps_that_node_out_instead_of_stopping_the_run(tmp_path: Path) -> None:
    app = malicious_app(query=info(**{"partition-id": 0, "energy-error": "no such meter"}), who=is_rogue)
    out, _ = run(tmp_path, app, grid_cls=JoiningGrid, nodes=4)
    assert [(r["clients"], r["failures"]) for r in out] == [(3, 0), (3, 0)]


# -- client state and paths the server or the run-config names --------------------------------------


def test_a_corrupt_client_state_file_fails_one_round_naming_it_then_the_client_starts_afresh(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    base = malicious_app()

    def corrupting(msg: Message, context: Context) -> Message:
        if msg.metadata.message_type == MessageType.TRAIN and pid_of(context) == BAD and msg.content["config"]["server-round"] == 2:  # type: ignore[index]
            for f in run_dir.glob(f"client-state/*/client-{BAD}.npz"):
                f.write_bytes(b"not a state file")
        return base(msg, context)

    app = ClientApp()
    app.train()(corrupting)
    app.evaluate()(corrupting)
    app.query()(corrupting)
    over = {"method": "fedselect", "local-test-fraction": 0.3, "state-store": "disk", "num-server-rounds": 3}
    out, _ = run(tmp_path, app, over)
    assert [r["failed_pids"] for r in out] == [[], [BAD], []]
    assert f"client-{BAD}.npz is unreadable" in out[1]["failure_reasons"][0]
    assert len(list(run_dir.glob(f"client-state/*/client-{BAD}.npz.corrupt"))) == 1


@pytest.mark.parametrize("token", ["../../escape", "/abs", "..", "a/b", ""])
def test_a_run_token_from_the_server_is_one_plain_path_component(tmp_path: Path, token: str) -> None:
    ctx = Context(1, 1, {"partition-id": 0, "state-dir": str(tmp_path / "node")}, RecordDict(), {})  # type: ignore[arg-type]
    cfg = RunConfig(state_store="disk")
    if not token:  # no token: the node's state-dir itself (the token is optional)
        store = state_store(cfg, ctx, token)
        assert isinstance(store, DiskStore) and store.root == tmp_path / "node"
        return
    with pytest.raises(ValueError, match="run-token"):
        state_store(cfg, ctx, token)
    good = "run-20260101-000000-abcdef"
    store = state_store(cfg, ctx, good)
    assert isinstance(store, DiskStore) and store.root == tmp_path / "node" / good


def test_a_run_token_escape_sent_in_a_real_message_fails_that_client_before_any_path_is_used(tmp_path: Path) -> None:
    from fedapp.client_app import app

    raw = full_config({**BASE, "method": "fedselect", "local-test-fraction": 0.3, "run-dir": str(tmp_path / "run")})
    grid = LocalGrid(app, raw, 3, [{"state-dir": str(tmp_path / f"node-{p}" / "state")} for p in range(3)])
    arrays = wire.to_record(initial_model())
    config = ConfigRecord({"partition-id": 0, "server-round": 1, "run-token": "../../escape"})
    msg = Message(RecordDict({"arrays": arrays, "config": config}), dst_node_id=1000, message_type=MessageType.TRAIN)
    (reply,) = grid.send_and_receive([msg])
    assert reply.has_error() and "run-token '../../escape'" in str(reply.error.reason)
    assert not (tmp_path / "node-0" / "escape").exists() and not (tmp_path / "escape").exists()


# -- run-config values that never pass ------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"lr": float("inf")}, "'lr' = inf is not allowed: expected a finite number"),
        ({"weight-decay": float("inf")}, "'weight-decay' = inf"),
        ({"input-noise": float("inf")}, "'input-noise' = inf"),
        ({"server-lr": float("inf")}, "'server-lr' = inf"),
        ({"dirichlet-alpha": float("inf")}, "'dirichlet-alpha' = inf"),
        ({"round-timeout": float("nan")}, "'round-timeout' = nan"),
        ({"method": "fedpews", "mask-init": float("-inf")}, "'mask-init' = -inf"),
        ({"seed": 2**64}, "'seed' = 18446744073709551616 is not allowed: expected an integer in 0..4294967295"),
        ({"data-seed": 2**32}, "'data-seed' = 4294967296"),
        ({"num-threads": 100_000}, "'num-threads' = 100000 is not allowed: expected an integer in 1..1024"),
        ({"mlp-hidden": "0"}, "'mlp-hidden' = '0' is not allowed"),
        ({"mlp-hidden": "64,0"}, "'mlp-hidden' = '64,0' is not allowed"),
        ({"data-root": "../../etc"}, "'data-root' = '../../etc' is not allowed"),
        ({"data-root": "/dev/zero"}, "'data-root' = '/dev/zero' is not allowed"),
        ({"data-root": "/proc/self"}, "'data-root' = '/proc/self' is not allowed"),
    ],
)
def test_values_that_never_pass_name_key_value_and_allowed(override: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(full_config(override))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_run_config_data_root_inside_the_project_or_absolute_still_works(tmp_path: Path) -> None:
    assert resolve(full_config({"data-root": "data"}))[0].data_root == "data"
    assert resolve(full_config({"data-root": str(tmp_path)}))[0].data_root == str(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="'data-root'"):
        resolve(full_config({"data-root": str(tmp_path / "file")}))


class NoNodes(LocalGrid):
    def get_node_ids(self) -> Iterable[int]:
        raise AssertionError("discovery started: the check should have come first")


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"min-replies": 4}, "'min-replies' = 4 is not allowed: a round samples 3 client(s)"),
        ({"min-replies": 2, "fraction-train": 0.34}, "'min-replies' = 2 is not allowed: a round samples 1 client(s)"),
        ({"local-epochs": 0, "local-steps": 0}, "'local-epochs' = 0 and 'local-steps' = 0"),
        ({"local-steps": 3_000_000}, "'local-steps' = 3000000 is not allowed"),
        ({"local-steps": 0, "local-epochs": 2_000_000}, "'local-epochs' = 2000000 is not allowed"),
        ({"mlp-hidden": "100000000"}, "'mlp-hidden' = '100000000' is not allowed: the model would hold 7,500,000,010 parameters"),
        ({"method": "fedselect"}, "'local-test-fraction' = 0.0: method 'fedselect' evaluates every client"),
        ({"personalized-eval": True}, "personalized-eval = true evaluates every client"),
        ({"method": "fedpart", "model": "cnn-bn", "mlp-hidden": "64,64"}, "'num-server-rounds' = 2 does not match the FedPart schedule"),
        (
            {"method": "fjord", "mask-transport": "seed", "local-test-fraction": 0.3},
            "run-config keys 'method' = 'fjord' and 'mask-transport' = 'seed' cannot be combined",
        ),
    ],
)
def test_contradictions_and_sizes_fail_at_server_start_before_discovery(tmp_path: Path, override: dict[str, Any], needle: str) -> None:
    from fedapp.client_app import app

    raw = full_config({**BASE, "run-dir": str(tmp_path / "run"), "local-test-fraction": 0.0, **override})
    with pytest.raises(ConfigError) as err:
        serve(NoNodes(app, raw, 3), raw)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


def test_fedselect_needs_no_local_epochs(tmp_path: Path) -> None:
    """FedSelect's passes are local-alt-epochs: local-epochs = 0 with local-steps = 0 is its normal case."""
    out, _ = run(tmp_path, malicious_app(), {"method": "fedselect", "local-epochs": 0, "local-steps": 0, "local-test-fraction": 0.3})
    assert [r["failures"] for r in out] == [0, 0]


def test_a_key_the_method_never_reads_is_a_one_line_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="flwr"):
        out, _ = run(tmp_path, malicious_app(), {"personal-limit": 0.5, "proximal-mu": 0.1, "tiers": "0.2,0.4,0.6,0.8,1.0"})
    assert len(out) == 2
    warned = [r.getMessage() for r in caplog.records if "is not used by method" in r.getMessage()]
    assert warned == [
        "run-config key 'personal-limit' = 0.5 is not used by method 'fedavg' (used by fedselect); ignored",
        "run-config key 'proximal-mu' = 0.1 is not used by method 'fedavg' (used by fedprox, base = 'fedprox'); ignored",
    ]  # tiers at its default: no warning


def test_a_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('lr = 0.1\nmethod = "fedavg\n')
    with pytest.raises(ConfigError) as err:
        load_toml_config(path)
    assert str(path) in str(err.value) and "not valid TOML" in str(err.value)


# -- held: no pickles anywhere ------------------------------------------------------------------------


def test_no_code_loads_pickles() -> None:
    root = Path(__file__).resolve().parents[1]
    sources = [p for d in ("fedapp", "scripts") for p in (root / d).rglob("*.py")] + [root / "client_app.py", root / "server_app.py"]
    assert not [p for p in sources if "allow_pickle=True" in p.read_text()]
    # the CIFAR batches are pickles: only the restricted unpickler reads them (tests/test_cifar_pickle.py)
    assert not [p for p in sources if re.search(r"\bpickle\.loads?\(|\btorch\.load\(", p.read_text())]
