"""FedPeWS with ``diversity-ref = probs``: a node's reported keep probabilities enter the other
clients' diversity reference as they stand, so a value outside [0, 1] (which no sigmoid gives)
refuses that node's reply, named in the round's row, and never reaches another client."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, Context, Message
from flwr.clientapp import ClientApp

from fedapp.client.handlers import handle_train
from fedapp.client.node_query import handle_query
from fedapp.methods.fedpews import PROBS, REF
from tests.test_faults import BAD, PEWS, pid_of, rows, run


def recording_app(bad_value: float, sent: dict[tuple[int, int], np.ndarray], probs: dict[tuple[int, int], np.ndarray]) -> ClientApp:
    """The real ClientApp; partition BAD sets one keep probability of its first layer to ``bad_value``.
    Records each honest client's received reference and reported probabilities by (round, partition)."""
    app = ClientApp()

    @app.train()
    def _train(msg: Message, context: Context) -> Message:
        pid, rnd = pid_of(context), int(msg.content.config_records["config"]["server-round"])  # type: ignore[arg-type]
        if REF in msg.content.array_records:
            sent[rnd, pid] = np.concatenate([a.numpy() for a in msg.content.array_records[REF].values()])
        reply = handle_train(msg, context)
        rec = reply.content.array_records[PROBS]
        if pid == BAD:
            name = next(iter(rec))
            values = rec[name].numpy().copy()
            values[0] = bad_value
            rec[name] = Array(values)
        probs[rnd, pid] = np.concatenate([a.numpy() for a in rec.values()])
        return reply

    app.query()(handle_query)
    return app


@pytest.mark.parametrize("bad_value", [7.0, -0.5, 1.0000001])
def test_keep_probabilities_outside_0_1_refuse_the_reply_and_never_reach_another_client(tmp_path: Path, bad_value: float) -> None:
    sent: dict[tuple[int, int], np.ndarray] = {}
    probs: dict[tuple[int, int], np.ndarray] = {}
    run(tmp_path, recording_app(bad_value, sent, probs), PEWS)
    out = rows(tmp_path / "run")
    for r in out:
        assert (r["clients"], r["failures"], r["failed_pids"], r["warmup"]) == (2, 1, [BAD], True), r
        assert any("keep probabilities outside [0, 1]" in f and "reply refused" in f for f in r["failure_reasons"]), r["failure_reasons"]
    # round 2: partition 0's reference is the mean of the others' last probabilities, i.e. partition 2's alone
    np.testing.assert_array_equal(sent[2, 0], probs[1, 2])
    np.testing.assert_array_equal(sent[2, 2], probs[1, 0])


def test_probabilities_at_0_and_1_are_an_honest_reply(tmp_path: Path) -> None:
    sent: dict[tuple[int, int], np.ndarray] = {}
    probs: dict[tuple[int, int], np.ndarray] = {}
    run(tmp_path, recording_app(1.0, sent, probs), PEWS)
    assert [(r["clients"], r["failures"]) for r in rows(tmp_path / "run")] == [(3, 0), (3, 0)]
    np.testing.assert_allclose(sent[2, 0], (probs[1, 1] + probs[1, 2]) / 2, rtol=1e-6)
