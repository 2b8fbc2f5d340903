"""personalized-eval-every: every client is evaluated only in rounds that are multiples of
it and in the last round; those rounds' numbers, and every round's training, equal the
run that evaluates each round (evaluation changes no client state)."""

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
    """LocalGrid that counts the evaluate messages it delivers, per round."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.evaluated: dict[int, int] = {}

    def _deliver(self, msg: Message) -> Message:
        if msg.metadata.message_type == MessageType.EVALUATE:
            rnd = int(msg.metadata.group_id)
            self.evaluated[rnd] = self.evaluated.get(rnd, 0) + 1
        return super()._deliver(msg)


def run(tmp: Path, every: int) -> tuple[list[dict[str, Any]], dict[int, int]]:
    raw = full_config(
        {
            "method": "fedselect", "num-clients": 4, "fraction-train": 0.5, "partition": "0,1,2|3,4,5|6,7|8,9",
            "local-test-fraction": 0.3, "local-alt-epochs": 1, "num-server-rounds": 5, "personalized-eval-every": every,
            "run-dir": str(tmp / f"every{every}"),
        }
    )  # fmt: skip
    grid = CountingGrid(client_app, raw, 4)
    return outcome_rows(serve(grid, raw, discovery_timeout=5), WIRE), grid.evaluated  # wire sizes count the evaluations


def test_every_third_round_and_the_last_evaluate_all_clients_with_the_same_numbers(tmp_path: Path) -> None:
    each, each_msgs = run(tmp_path, 1)
    sparse, sparse_msgs = run(tmp_path, 3)
    assert each_msgs == {r: 4 for r in range(1, 6)}
    assert sparse_msgs == {3: 4, 5: 4}
    for a, b in zip(each, sparse, strict=True):
        if b["round"] in (3, 5):
            assert a == b
            assert b["evaluated_clients"] == 4
        else:
            assert not set(PERSONAL) & set(b), b
            assert {k: v for k, v in a.items() if k not in PERSONAL} == b
