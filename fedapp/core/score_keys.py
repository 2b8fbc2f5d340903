"""The names a train message and its reply use for the client's personalised score, so that one
message per client and round carries it (fedapp.server.scores; docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Mapping

BEFORE = "score-before"  # config: score the received model first, as that round's evaluate message would (its round)
AFTER = "score-after"  # config: 1 = score the model the training left, as this round's evaluate message would
PREFIX = {BEFORE: "before/", AFTER: "after/"}  # the reply metrics of each score, under these prefixes


def prefixed(which: str, metrics: Mapping[str, float]) -> dict[str, float]:
    return {PREFIX[which] + k: v for k, v in metrics.items()}


def split(metrics: Mapping[str, float]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """A train reply's own metrics, and each score it carries (by BEFORE / AFTER) without its prefix."""
    rest: dict[str, float] = {}
    scores: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        which = next((w for w, p in PREFIX.items() if key.startswith(p)), None)
        if which is None:
            rest[key] = value
        else:
            scores.setdefault(which, {})[key[len(PREFIX[which]) :]] = value
    return rest, scores
