"""A node's self-reported local evaluation is refused where no model could produce it: an accuracy
that is no whole number of correct samples out of the local test size the server knows, or a loss
below (1 - accuracy) x ln 2. Honest evaluations (real logits, by the hundred) always pass."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from fedapp.core import score_keys
from fedapp.core.evaluate import evaluate
from fedapp.server.reply_checks import ReplyError, evaluation
from tests.test_faults import BAD, PERSONAL, malicious_app, run, set_metric


class Fixed(torch.nn.Module):
    """A 'model' whose outputs are given logits, so evaluate() scores them exactly as for a client."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(logits, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits[x.long().view(-1)]


def test_hundreds_of_honest_evaluations_pass_and_made_up_ones_are_refused() -> None:
    rng = random.Random(37)
    torch.manual_seed(37)
    refused = 0
    for _ in range(300):
        n, classes = rng.randint(1, 400), rng.randint(2, 20)
        logits = torch.randn(n, classes) * rng.choice([0.1, 1.0, 10.0, 100.0])
        y = torch.randint(0, classes, (n,))
        acc, loss = evaluate(Fixed(logits), torch.arange(n, dtype=torch.float32).view(n, 1), y)
        evaluation({"accuracy": acc, "loss": loss, "num-examples": n}, n)  # an honest result never fails
        made_up = rng.random()
        k = round(made_up * n)
        try:
            evaluation({"accuracy": made_up, "loss": 5.0, "num-examples": n}, n)
            assert k / n == made_up
        except ReplyError as err:
            assert k / n != made_up and "not a whole number of correct samples" in str(err)
            refused += 1
        low = (1 - acc) * math.log(2) * 0.99
        if acc < 1.0:
            with pytest.raises(ReplyError, match="below"):
                evaluation({"accuracy": acc, "loss": low, "num-examples": n}, n)
    assert refused >= 290


def test_a_made_up_personalised_accuracy_is_that_nodes_evaluation_failure(tmp_path: Path) -> None:
    made_up = set_metric("accuracy", 0.987654321)  # where a score travels: an evaluate reply, or the next train reply
    carried = set_metric(score_keys.PREFIX[score_keys.BEFORE] + "accuracy", 0.987654321)
    out, _ = run(tmp_path, malicious_app(train=carried, evaluate=made_up), PERSONAL)
    for r in out:
        assert (r["failures"], r["eval_failures"], r["evaluated_clients"]) == (0, 1, 2), r
        assert any(
            f"node {1000 + BAD}: evaluation dropped" in f and "not a whole number of correct samples" in f for f in r["failure_reasons"]
        )
    out, _ = run(tmp_path / "perfect", malicious_app(evaluate=set_metric("accuracy", 1.0)), PERSONAL)
    assert all(r.get("eval_failures", 0) == 0 for r in out)  # 1.0 with its real loss is possible: a lie within the bounds passes
