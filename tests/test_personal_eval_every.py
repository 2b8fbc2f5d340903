"""personalized-eval-every: every client is evaluated only in rounds that are multiples of
it and in the last round; those rounds' numbers, and every round's training, equal the
run that evaluates each round (evaluation changes no client state). An evaluate message goes
only to a client that has no standing score (FedSelect: one never trained yet) and does not
train in the next round, or in the last round (fedapp.server.scores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flwr.app import Message, MessageType

from fedapp.client_app import app as client_app
from fedapp.engine.local_grid import LocalGrid
from fedapp.server.loop import serve
from fedapp.sim.run_local import full_config
from tests.run_rows import WIRE, outcome_rows

PERSONAL = ("personalized_accuracy", "personalized_accuracy_min", "personalized_accuracy_max", "evaluated_clients")


class CountingGrid(LocalGrid):
    """LocalGrid that counts the evaluate messages it delivers, per round they evaluate, and records who trains when."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.evaluated: dict[int, int] = {}
        self.trained: dict[int, set[int]] = {}

    def _deliver(self, msg: Message) -> Message:
        kind = msg.metadata.message_type
        if kind == MessageType.EVALUATE:
            rnd = int(msg.metadata.group_id)
            self.evaluated[rnd] = self.evaluated.get(rnd, 0) + 1
        elif kind == MessageType.TRAIN:
            self.trained.setdefault(int(msg.metadata.group_id), set()).add(msg.metadata.dst_node_id - 1000)
        return super()._deliver(msg)


def expected_evaluations(trained: dict[int, set[int]], rounds: list[int], last: int) -> dict[int, int]:
    """Per evaluation round r: the clients not trained by r that do not train in r + 1 (all of them after the last)."""
    out = {}
    for r in rounds:
        before = set().union(*(trained[k] for k in range(1, r + 1)))
        n = len({p for p in range(4) if p not in before and (r == last or p not in trained[r + 1])})
        if n:
            out[r] = n
    return out


def run(tmp: Path, every: int) -> tuple[list[dict[str, Any]], CountingGrid]:
    raw = full_config(
        {
            "method": "fedselect", "num-clients": 4, "fraction-train": 0.5, "partition": "0,1,2|3,4,5|6,7|8,9",
            "local-test-fraction": 0.3, "local-alt-epochs": 1, "num-server-rounds": 5, "personalized-eval-every": every,
            "run-dir": str(tmp / f"every{every}"),
        }
    )  # fmt: skip
    grid = CountingGrid(client_app, raw, 4)
    return outcome_rows(serve(grid, raw, discovery_timeout=5), WIRE | {"messages"}), grid  # wire sizes count the evaluations


def test_every_third_round_and_the_last_evaluate_all_clients_with_the_same_numbers(tmp_path: Path) -> None:
    each, each_grid = run(tmp_path, 1)
    sparse, sparse_grid = run(tmp_path, 3)
    assert each_grid.trained == sparse_grid.trained
    assert each_grid.evaluated == expected_evaluations(each_grid.trained, [1, 2, 3, 4, 5], 5)
    assert sparse_grid.evaluated == expected_evaluations(sparse_grid.trained, [3, 5], 5)
    assert sum(each_grid.evaluated.values()) < 4  # every client trains by round 3 here: few evaluate messages at all
    for a, b in zip(each, sparse, strict=True):
        if b["round"] in (3, 5):
            assert a == b
            assert b["evaluated_clients"] == 4
        else:
            assert not set(PERSONAL) & set(b), b
            assert {k: v for k, v in a.items() if k not in PERSONAL} == b
