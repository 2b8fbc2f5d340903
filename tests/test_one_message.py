"""One message per client per round, for every personalised method (fedapp.server.scores).

Each run is recorded at the grid: which node gets which message, in which round. Before a round's
first train message (and after the run) the test evaluates every client as the old protocol did,
by the evaluate handler itself on a copy of the node's context, with the whole global model of the
round just finished (the checkpoint's) and that round's evaluate config. Each row's personalised
accuracy must equal those numbers bit for bit, and the evaluate messages must go only where the
rules say, with no node getting two messages in one round but the last.
"""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp

from fedapp.batched import seam
from fedapp.client.handlers import handle_evaluate, handle_train
from fedapp.client.node_query import handle_query
from fedapp.client_app import app as client_app
from fedapp.core import score_keys, wire
from fedapp.engine.local_grid import LocalGrid
from fedapp.server import checkpoint
from fedapp.server.loop import serve
from fedapp.server.results import read_metrics
from fedapp.server.scores import covers
from fedapp.sim.run_local import full_config
from tests.run_rows import WIRE, outcome_rows

N, ROUNDS = 4, 3
BASE = {
    "dataset": "digits", "num-clients": N, "partition": "0,1,2|3,4,5|6,7|8,9", "local-test-fraction": 0.3,
    "mlp-hidden": "32", "local-steps": 10, "batch-size": 16, "lr": 0.5, "fraction-train": 0.25, "num-server-rounds": ROUNDS,
    "tiers": "0.5,1.0", "local-alt-epochs": 1,
}  # fmt: skip


class Recording(LocalGrid):
    """LocalGrid that logs every train and evaluate message, and evaluates every client as the old
    protocol did (``old``: round -> partition -> reply metrics) before each round's first train message."""

    def __init__(self, run_dir: Path, tiers: list[float], *args: Any):
        super().__init__(*args)
        self.run_dir, self.tiers = run_dir, tiers
        self.log: list[tuple[str, int, int]] = []  # (message type, round it names, partition)
        self.old: dict[int, dict[int, dict[str, float]]] = {}
        self.dense: set[tuple[int, int]] = set()  # (round, partition) of each train message that carries the whole model

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        for m in messages:
            kind = m.metadata.message_type
            if kind in (MessageType.TRAIN, MessageType.EVALUATE):
                rnd = int(m.metadata.group_id)
                if kind == MessageType.TRAIN and rnd > 1 and rnd - 1 not in self.old:
                    self.old[rnd - 1] = self.old_protocol(rnd - 1)
                self.log.append((kind, rnd, m.metadata.dst_node_id - 1000))
                if kind == MessageType.TRAIN and "arrays-mask" not in m.content.array_records:
                    self.dense.add((rnd, m.metadata.dst_node_id - 1000))
        return super().send_and_receive(messages, timeout=timeout)

    def old_protocol(self, rnd: int) -> dict[int, dict[str, float]]:
        """Round ``rnd``'s evaluate message to every client, with the whole global model, on a copy of its context."""
        ckpt = checkpoint.load(self.run_dir)
        assert ckpt is not None and ckpt.round == rnd
        record = wire.to_record(ckpt.arrays)
        out = {}
        for pid in range(N):
            extra = {"active-fraction": self.tiers[pid * len(self.tiers) // N]} if self.tiers else {}
            config: dict[str, Any] = {
                "run-token": ckpt.token,
                "run-dir": str(self.run_dir),
                **extra,
                "server-round": rnd,
                "partition-id": pid,
            }
            msg = Message(
                RecordDict({"arrays": record, "config": ConfigRecord(config)}),
                dst_node_id=1000 + pid, message_type=MessageType.EVALUATE, group_id=str(rnd),
            )  # fmt: skip
            reply = handle_evaluate(msg, copy.deepcopy(self.contexts[1000 + pid]))
            out[pid] = {k: float(v) for k, v in reply.content.metric_records["metrics"].items()}  # type: ignore[arg-type]
        return out


def run(tmp: Path, over: dict[str, Any], app: ClientApp = client_app) -> tuple[list[dict[str, Any]], Recording]:
    raw = full_config({**BASE, **over, "run-dir": str(tmp / "run")})
    tiered = over["method"] in ("fedspu", "feddrop", "fjord")
    grid = Recording(tmp / "run", [0.5, 1.0] if tiered else [], app, raw, N)
    out = serve(grid, raw, discovery_timeout=5)
    grid.old[ROUNDS] = grid.old_protocol(ROUNDS)
    return read_metrics(out), grid


def expected_evaluations(kind: str, trained: dict[int, set[int]], dense: set[tuple[int, int]] | None) -> dict[int, list[int]]:
    """Per round, the partitions an evaluate message of that round goes to, by the rules:
    a client with a standing score is not asked; one that trains in the next round scores there
    (where its train message carries what the evaluation reads); the last round asks all the rest.
    ``kind``: "received" (no score stands), "trained" (a trained client's stands), "stands" (an evaluated one's too);
    ``dense``: the (round, partition) train messages that carry the whole model, where the evaluation reads it
    all (None: every train message carries what the evaluation reads)."""
    standing: set[int] = set()
    out = {}
    for r in range(1, ROUNDS + 1):
        if kind != "received":
            standing |= trained[r]
        need = [p for p in range(N) if p not in standing]
        scores_there = {p for p in trained.get(r + 1, set()) if dense is None or (r + 1, p) in dense}
        asked = [p for p in need if r == ROUNDS or p not in scores_there]
        if kind == "stands":
            standing |= set(asked)
        if asked:
            out[r] = asked
    return out


# (run-config, kind, whether the evaluation reads the whole model): FedSPU and FedDrop read none of it
# (their stored model), FjORD its width's sub-model (what its train messages carry)
METHODS: list[tuple[dict[str, Any], str, bool]] = [
    ({"method": "fedspu"}, "stands", False),
    ({"method": "feddrop"}, "stands", False),
    ({"method": "fjord"}, "received", False),
    ({"method": "fedselect"}, "trained", True),
    ({"method": "fedper"}, "trained", True),
    ({"method": "local"}, "trained", True),  # its train messages carry no global entry
    ({"method": "fedavg-ft"}, "received", True),
    ({"method": "fedavg", "personalized-eval": True}, "received", True),
    ({"method": "fedpews", "personalized-eval": True, "warmup-fraction": 0.5}, "received", True),  # W = 2 rounds of sub-models
]


@pytest.mark.parametrize(("over", "kind", "reads_all"), METHODS, ids=[m[0]["method"] for m in METHODS])
def test_personalised_accuracy_equals_the_evaluate_message_protocol_with_one_message_per_client_and_round(
    tmp_path: Path, over: dict[str, Any], kind: str, reads_all: bool
) -> None:
    rows, grid = run(tmp_path, over)
    assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1))
    for row in rows:
        old = grid.old[row["round"]]
        accs = [old[p]["accuracy"] for p in range(N)]
        want = {
            "personalized_accuracy": float(np.mean(accs)), "personalized_accuracy_min": min(accs),
            "personalized_accuracy_max": max(accs), "evaluated_clients": N,
        }  # fmt: skip
        assert {k: row[k] for k in want} == want, row["round"]
        assert "eval_failures" not in row
    trained = {r: {p for kind_, rr, p in grid.log if kind_ == MessageType.TRAIN and rr == r} for r in range(1, ROUNDS + 1)}
    assert all(len(t) == 1 for t in trained.values())  # fraction-train 0.25 of 4
    evaluated: dict[int, list[int]] = {}
    for kind_, r, p in grid.log:
        if kind_ == MessageType.EVALUATE:
            evaluated.setdefault(r, []).append(p)
    assert evaluated == expected_evaluations(kind, trained, grid.dense if reads_all else None)
    # while round p plays: its train messages, then the evaluate messages of round p - 1 (and in the last round its own)
    segments: dict[int, list[int]] = {}
    playing = 0
    for kind_, r, p in grid.log:
        playing = r if kind_ == MessageType.TRAIN else playing
        segments.setdefault(playing, []).append(p)
    for row in rows:
        sent = segments[row["round"]]
        assert row["messages"] == {"train": 1, "evaluate": len(sent) - 1}
        if row["round"] < ROUNDS:
            assert len(sent) == len(set(sent)), (row["round"], sent)  # no node gets two messages in one round


def test_scoring_in_train_messages_changes_no_training(tmp_path: Path) -> None:
    """FedAvg-FT trains as FedAvg does; its clients fine-tune a copy for their scores (before training, on a
    lane of the batched engine too): the global models and central accuracies equal FedAvg's, bit for bit."""
    batched = {"client-batch": 2, "fraction-train": 0.5}
    ft_rows, grid = run(tmp_path / "ft", {"method": "fedavg-ft", **batched})
    for row in ft_rows:  # the old protocol's evaluate messages fine-tuned one client at a time
        assert row["personalized_accuracy"] == float(np.mean([grid.old[row["round"]][p]["accuracy"] for p in range(N)]))
    avg = serve(LocalGrid(client_app, raw := full_config({**BASE, "method": "fedavg", **batched,
                                                          "run-dir": str(tmp_path / "avg")}), N), raw, discovery_timeout=5)  # fmt: skip
    avg_rows = read_metrics(avg)
    assert [(r["accuracy"], r["loss"]) for r in ft_rows] == [(r["accuracy"], r["loss"]) for r in avg_rows]
    with np.load(tmp_path / "ft" / "run" / "model.npz") as a, np.load(avg / "model.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


def app_with(train: Any) -> ClientApp:
    app = ClientApp()
    app.train()(train)
    app.evaluate()(handle_evaluate)
    app.query()(handle_query)
    return app


def test_a_client_whose_train_reply_carries_no_score_is_asked_again(tmp_path: Path) -> None:
    """Partition 1's round-2 reply loses its score: its round-1 score no longer stands (it trained since); its
    round-2 score comes from round 3's message, and the rows still equal the evaluate-message protocol's."""

    def train(msg: Message, context: Context) -> Message:
        reply = handle_train(msg, context)
        if context.node_config["partition-id"] == 1 and msg.metadata.group_id == "2":
            metrics = reply.content.metric_records["metrics"]
            for key in [k for k in metrics if k.startswith(score_keys.PREFIX[score_keys.AFTER])]:
                del metrics[key]
        return reply

    rows, grid = run(tmp_path, {"method": "fedspu", "fraction-train": 1.0}, app_with(train))
    for row in rows:
        assert row["personalized_accuracy"] == float(np.mean([grid.old[row["round"]][p]["accuracy"] for p in range(N)]))
    assert [r["messages"]["evaluate"] for r in rows] == [0, 0, 0]  # partition 1 scored round 2's model before training in round 3
    assert [e for e in grid.log if e[0] == MessageType.EVALUATE] == []


def test_the_score_before_training_trains_alone_on_a_batched_lane(tmp_path: Path) -> None:
    """FedAvg-FT's score fine-tunes as its evaluate message did, one client at a time: on a lane of the batched
    engine the park point sees only the training, never the scoring's fine-tune."""
    parked: list[tuple[bool, int]] = []

    def train(msg: Message, context: Context) -> Message:
        calls: list[Any] = []

        def door(call: Any) -> Any:
            calls.append(call)
            return call.run_here()

        def lane() -> Message:
            seam.open_door(door)
            return handle_train(msg, context)

        reply = contextvars.copy_context().run(lane)
        parked.append((score_keys.BEFORE in msg.content["config"], len(calls)))  # type: ignore[operator]
        return reply

    run(tmp_path, {"method": "fedavg-ft", "fraction-train": 0.5}, app_with(train))
    assert (True, 1) in parked
    assert all(n == 1 for _, n in parked), parked


def test_covers_names_every_entry_the_evaluation_reads() -> None:
    rows = np.array([[True, True], [False, False]])
    assert covers(None, None) and covers(None, {"w": rows})
    assert not covers({"w": rows}, None)  # a partial message never holds the whole model
    assert covers({"w": rows, "b": np.ones(2, bool)}, {"w": rows})
    assert covers({"w": rows}, {"w": rows, "b": np.zeros(2, bool)})  # nothing of b is read
    assert not covers({"w": rows}, {"w": ~rows})
    assert not covers({"w": rows}, {"w": np.ones((2, 2), bool)})
    assert not covers({"w": rows}, {"b": np.ones(2, bool)})


class Killed(Exception):
    pass


class DyingGrid(LocalGrid):
    """The server dies as round 3's train messages go out (after round 2's checkpoint)."""

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        if any(m.metadata.message_type == MessageType.TRAIN and m.metadata.group_id == "3" for m in messages):
            raise Killed
        return super().send_and_receive(messages, timeout=timeout)


@pytest.mark.parametrize("method", ["fjord", "fedselect"])
def test_a_row_waiting_for_scores_survives_a_crash_and_resume(tmp_path: Path, method: str) -> None:
    """Round 2's row waits in the checkpoint for round 3's scores; the resumed run completes it: every row
    (messages sent included) equals the uninterrupted run's, and round 2's was written once."""
    over = {**BASE, "method": method, "num-server-rounds": 4}
    straight = serve(LocalGrid(client_app, raw := full_config({**over, "run-dir": str(tmp_path / "a")}), N), raw, discovery_timeout=5)
    cut = tmp_path / "b"
    raw = full_config({**over, "run-dir": str(cut)})
    with pytest.raises(Killed):
        serve(DyingGrid(client_app, raw, N), raw, discovery_timeout=5)
    ckpt = checkpoint.load(cut)
    assert ckpt is not None and ckpt.round == 2 and ckpt.scores is not None and ckpt.scores["pending"]["round"] == 2
    assert [r["round"] for r in read_metrics(cut)] == [1]
    raw = full_config({**over, "run-dir": str(cut), "resume": True})
    serve(LocalGrid(client_app, raw, N), raw, discovery_timeout=5)
    assert outcome_rows(cut, WIRE) == outcome_rows(straight, WIRE)
