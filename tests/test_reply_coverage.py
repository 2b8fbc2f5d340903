"""Every train reply is held to its task: entries outside what the server gave the node are refused.

Probes through the real ClientApp, server loop and MaskedStrategy on the in-process grid
(tests/test_faults.py's harness): the node of partition BAD sends, on top of its honest reply,
entries its task never gave it. Each is that node's failure, named in the round's row with the
count of entries outside its task, and the others' rounds go on. Unit tests check the count
against hand-computed masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, Message

from fedapp.core.aggregate import Contribution
from fedapp.server.reply_checks import ReplyError, within_task
from tests.test_faults import BAD, Tamper, initial_model, malicious_app, run


def send_dense(names: set[str] | None = None, from_round: int = 1) -> Tamper:
    """The reply's tensors (and ``names`` beyond them) sent whole, as the global model's w0 values,
    from round ``from_round`` on."""

    def tamper(reply: Message) -> Message:
        if int(reply.metadata.group_id) < from_round:
            return reply
        values = reply.content.array_records["values"]
        start = initial_model(**OVER[CURRENT[0]])
        for name in sorted(set(values) | (names or set())):
            values[name] = Array(start[name].copy())
        if "mask" in reply.content:
            del reply.content["mask"]
        return reply

    return tamper


OVER: dict[str, dict[str, Any]] = {
    # two layer groups (hidden, output), one round each, no full-network round
    "fedpart": {"method": "fedpart", "warmup-rounds": 0, "cycles": 1, "rounds-per-layer": 1, "full-rounds-between-cycles": 0},
    "fedselect": {"method": "fedselect", "local-test-fraction": 0.3, "num-server-rounds": 3},
    "fedspu": {"method": "fedspu", "tiers": "0.5,0.5,1.0", "local-test-fraction": 0.3},  # partition 1 keeps half its neurons
    "fedpews-fixed": {"method": "fedpews-fixed", "warmup-fraction": 1.0},
}
CURRENT = ["fedavg"]


def every_parameter() -> set[str]:
    return {k for k in initial_model() if not k.endswith("num_batches_tracked")}


@pytest.mark.parametrize(
    ("method", "tamper_rounds"),
    [("fedpart", [1, 2]), ("fedselect", [3]), ("fedspu", [1, 2]), ("fedpews-fixed", [1, 2])],
)
def test_a_reply_beyond_its_task_is_refused_and_named(tmp_path: Path, method: str, tamper_rounds: list[int]) -> None:
    """FedPart: every layer in a one-group round; FedSelect: in round 3, the coordinates its round-2
    reply kept personal (the server learns a personalised client's personal set from its replies, and
    that set may only grow); FedSPU: the neurons it was told to drop; FedPeWS-Fixed: the other blocks."""
    CURRENT[0] = method
    honest, honest_model = run(tmp_path / "honest", malicious_app(), OVER[method])
    out, model = run(tmp_path / "bad", malicious_app(train=send_dense(every_parameter(), tamper_rounds[0])), OVER[method])
    for r in out:
        if r["round"] in tamper_rounds:
            assert (r["clients"], r["failures"], r["failed_pids"]) == (2, 1, [BAD]), r
            assert any("entries outside its task" in f and "node 1001" in f for f in r["failure_reasons"]), r["failure_reasons"]
        else:
            assert r["failures"] == 0, r
    assert all(h["failures"] == 0 for h in honest)
    assert all(np.isfinite(v).all() for v in model.values())
    assert any(not np.array_equal(model[k], honest_model[k]) for k in model)  # the bad node's rounds lost its update


def test_honest_fedpart_fedselect_fedspu_replies_all_pass(tmp_path: Path) -> None:
    for method in ("fedpart", "fedselect", "fedspu"):
        out, _ = run(tmp_path / method, malicious_app(), OVER[method])
        assert [r["failures"] for r in out] == [0] * len(out), (method, out)


def contribution(values: dict[str, np.ndarray], masks: dict[str, np.ndarray] | None = None) -> Contribution:
    return Contribution(1.0, values, masks or {})


def test_within_task_counts_entries_outside_by_hand() -> None:
    allowed = {"w": np.array([[True, False], [True, True]]), "b": np.array([True, False])}
    within_task(contribution({"w": np.zeros(3)}, {"w": np.array([True, False, True, True])}), allowed)  # exactly the task: passes
    within_task(contribution({"b": np.zeros(1)}, {"b": np.array([True, False])}), allowed)  # a subset: passes
    with pytest.raises(ReplyError, match=r"1 entries outside its task in 1 tensors \(w: 1\)"):
        within_task(contribution({"w": np.zeros((2, 2))}), allowed)  # dense w covers w[0, 1]
    with pytest.raises(ReplyError, match=r"2 entries outside its task in 2 tensors \(b: 1, w: 1\)"):
        within_task(contribution({"w": np.zeros(2), "b": np.zeros(2)}, {"w": np.array([False, True, False, True])}), allowed)
    with pytest.raises(ReplyError, match=r"5 entries outside its task in 1 tensors \(extra: 5\)"):
        within_task(contribution({"extra": np.zeros(5)}), allowed)  # a tensor the task never named
    within_task(contribution({"extra": np.zeros(5)}), None)  # None: any tensor (FedAvg)


def test_a_task_of_no_entries_refuses_any_entry() -> None:
    """Local sends nothing: a task whose masks are all False refuses one entry."""
    allowed = {"w": np.zeros(4, bool)}
    within_task(contribution({}), allowed)
    with pytest.raises(ReplyError, match="1 entries outside"):
        within_task(contribution({"w": np.zeros(1)}, {"w": np.array([False, False, True, False])}), allowed)
