"""Each client's personalised score, carried by the one message it gets per round where it can be.

A round's row reports, for every node, the score its evaluate message of that round would report
(``ServerPolicy.score_kind``):

* ``"trained"`` (FedSPU, FedDrop, FedSelect, FedPer, FedBN, Local): the client's own model as its
  last local training left it. A train message asks the client to score it after training
  (``score-after``); that score stands until the client trains again, so a client that does not
  train is not asked again. An evaluate reply's score stands too where the policy says so
  (``eval_score_stands``: FedSPU and FedDrop score their stored model, or w0); a personal-model
  client never trained scores the global model, which moves, so it is asked each round.
* ``"received"`` (FjORD, FedAvg-FT, ``personalized-eval = true``): the model the round leaves the
  client, known to the client only when the next round's message brings it. A client that trains
  in the next round scores it there before training (``score-before``), where its train message
  carries what the evaluation reads (``eval_download``, the same ``eval_config``).

A round whose scores are not all at hand leaves its row ``Pending``; the next round completes it
(evaluate messages only to the clients that did not score it in their train message), and the last
round is completed at once (one closing evaluate). The pending row travels in the checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedapp.core import score_keys
from fedapp.core.config import RunConfig
from fedapp.methods.base import NodeTask, Scalar, ServerPolicy

Score = dict[str, float]


@dataclass
class Pending:
    """A round's metrics row without its evaluation (``draft``: items in order, ``at``: where the
    evaluation's keys go; ``train``: the train replies' metrics, ``times``: seconds, start, end, for
    the ledger), the scores at hand (``known``, with ``reasons`` for any dropped) and the nodes
    whose scores are still to come (``need``: partition -> node), all in evaluation ``order``."""

    round: int
    draft: list[tuple[str, Any]]
    at: int
    train: dict[int, Score]
    times: tuple[float, float, float]
    method_keys: list[str]
    order: list[int]
    known: dict[int, Score] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    need: dict[int, int] = field(default_factory=dict)

    def meta(self) -> dict[str, Any]:
        """As JSON for the checkpoint (floats round-trip exactly)."""
        return {
            "round": self.round, "draft": [[k, clean(v)] for k, v in self.draft], "at": self.at,
            "train": {str(p): m for p, m in self.train.items()}, "times": list(self.times), "method_keys": self.method_keys,
            "order": self.order, "known": {str(p): m for p, m in self.known.items()}, "reasons": self.reasons,
            "need": {str(p): n for p, n in self.need.items()},
        }  # fmt: skip

    @classmethod
    def from_meta(cls, m: Mapping[str, Any]) -> Pending:
        seconds, start, end = (float(t) for t in m["times"])
        return cls(
            int(m["round"]), [(str(k), v) for k, v in m["draft"]], int(m["at"]), {int(p): v for p, v in m["train"].items()},
            (seconds, start, end), list(m["method_keys"]), [int(p) for p in m["order"]],
            {int(p): v for p, v in m["known"].items()}, list(m["reasons"]), {int(p): int(n) for p, n in m["need"].items()},
        )  # fmt: skip


def parse_meta(meta: Mapping[str, Any] | None) -> tuple[dict[int, tuple[int, Score]], Pending | None]:
    """``ScoreBook.meta()`` back: the standing scores and the pending row (KeyError, TypeError, ValueError if damaged)."""
    meta = meta or {}
    standing = {int(p): (int(n), {str(k): float(v) for k, v in s.items()}) for p, (n, s) in meta.get("standing", {}).items()}
    return standing, Pending.from_meta(meta["pending"]) if "pending" in meta else None


def clean(v: Any) -> Any:
    """numpy scalars and arrays as plain Python (JSON)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return v


def covers(sent: Mapping[str, np.ndarray] | None, needed: Mapping[str, np.ndarray] | None) -> bool:
    """Whether a message carrying ``sent`` (None: everything) holds every entry ``needed`` names (None: everything)."""
    if sent is None:
        return True
    if needed is None:
        return False
    return all(not m.any() or (name in sent and bool(np.all(sent[name] | ~m))) for name, m in needed.items())


class ScoreBook:
    """Which train messages also score, and the scores that stand (partition -> (node, score))."""

    def __init__(self, policy: ServerPolicy, cfg: RunConfig):
        self.policy = policy
        self.on = policy.personalized_eval or cfg.personalized_eval
        self.trained = self.on and policy.score_kind == "trained"
        self.standing: dict[int, tuple[int, Score]] = {}
        self.before: tuple[int, Mapping[int, int]] = (0, {})  # (round, partition -> node) to score the received model first

    def ask_before(self, pending: Pending | None) -> None:
        """This round's train messages score the pending round's received model for its missing partitions."""
        self.before = (0, {}) if pending is None else (pending.round, pending.need)

    def flags(self, server_round: int, pid: int, task: NodeTask) -> dict[str, Scalar]:
        """Config a train message adds so that its reply carries the scores the book wants."""
        out: dict[str, Scalar] = {}
        rnd, need = self.before
        if pid in need and self.can_score_before(rnd, pid, task):
            out[score_keys.BEFORE] = rnd
        if self.trained:
            out[score_keys.AFTER] = 1
        return out

    def can_score_before(self, rnd: int, pid: int, task: NodeTask) -> bool:
        """The train message carries what round ``rnd``'s evaluate message would (entries and config)."""
        same_config = all(task.config.get(k) == v for k, v in self.policy.eval_config(rnd, pid).items())
        return same_config and covers(task.download_masks, self.policy.eval_download(rnd, pid))

    def after_training(self, sent: Mapping[int, int], after: Mapping[int, Score]) -> None:
        """A client sent a train message no longer has its standing score; one that scored its trained model has that."""
        for pid, node in sent.items():
            self.standing.pop(pid, None)
            if self.trained and pid in after:
                self.standing[pid] = (node, after[pid])

    def after_evaluation(self, nodes: Mapping[int, int], got: Mapping[int, Score]) -> None:
        if self.trained and self.policy.eval_score_stands:
            self.standing.update({pid: (nodes[pid], s) for pid, s in got.items() if pid in nodes})

    def meta(self, pending: Pending | None) -> dict[str, Any] | None:
        """The standing scores and ``pending``, as JSON for the checkpoint (None: neither)."""
        if not self.standing and pending is None:
            return None
        out: dict[str, Any] = {"standing": {str(p): [n, s] for p, (n, s) in self.standing.items()}}
        if pending is not None:
            out["pending"] = pending.meta()
        return out

    def load_meta(self, meta: Mapping[str, Any] | None) -> Pending | None:
        """Restore the standing scores from a checkpoint's ``meta()``; return its pending row, if any."""
        self.standing, pending = parse_meta(meta)
        return pending

    def stands(self, pid: int, node: int) -> Score | None:
        """The standing score of ``pid``, if its node is the one that reported it."""
        held = self.standing.get(pid)
        return held[1] if held is not None and held[0] == node else None
