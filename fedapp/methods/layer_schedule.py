"""FedPart's round schedule (../shared/specs/fedpart.md §1.2): which layer group trains
in each round, as a list indexed by round - 1 (``FULL`` = every parameter).

    W full rounds, then C cycles over the M groups with R/L rounds per group,
    B full rounds between consecutive cycles:  T = W + C*M*R/L + (C-1)*B.

``random`` draws a fresh group uniformly every partial round (the paper's text), from
its own seeded generator so the server's schedule is reproducible.
"""

from __future__ import annotations

import numpy as np

FULL = -1
ORDERS = ("sequential", "reverse", "random")


def schedule_length(num_groups: int, cycles: int, warmup: int, between: int, rounds_per_layer: int) -> int:
    return warmup + cycles * num_groups * rounds_per_layer + max(cycles - 1, 0) * between


def schedule(num_groups: int, cycles: int, warmup: int, between: int, rounds_per_layer: int, order: str, seed: int = 0) -> list[int]:
    """Group index (0-based, shallow to deep) per round, or FULL."""
    if order not in ORDERS:
        raise ValueError(f"layer order {order!r} is not one of {', '.join(ORDERS)}")
    if num_groups < 1:
        raise ValueError("a model needs at least one layer group")
    rng = np.random.default_rng(seed)
    out = [FULL] * warmup
    for c in range(cycles):
        if c > 0:
            out += [FULL] * between
        if order == "random":
            out += [int(g) for g in rng.integers(0, num_groups, size=num_groups * rounds_per_layer)]
            continue
        groups = range(num_groups) if order == "sequential" else reversed(range(num_groups))
        for g in groups:
            out += [g] * rounds_per_layer
    return out
