"""Masked weighted averaging with per-parameter contributor counts (pure numpy).

    x_avg[l] = sum_i w_i m_i[l] x_i[l] / sum_i w_i m_i[l]     where the denominator > 0
    x_avg[l] = x_g[l]                                        where nobody contributed
    x_g     <- x_g - server_lr * (x_g - x_avg)

FedAvg and FedProx are the all-ones-mask case. Non-float tensors (BatchNorm's
``num_batches_tracked``) are never averaged: the server keeps its own value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Contribution:
    """One client's reply: a weight, and per tensor the selected values and their mask.

    ``values[k]`` holds the values at ``masks[k]`` in C order (1-D), or the whole
    tensor when ``masks`` has no entry for ``k`` (dense). Tensors absent from
    ``values`` were not sent and count as mask zero.
    """

    weight: float
    values: dict[str, np.ndarray]
    masks: dict[str, np.ndarray] = field(default_factory=dict)

    def mask_of(self, name: str, size: int) -> np.ndarray | None:
        if name not in self.values:
            return None
        m = self.masks.get(name)
        return np.ones(size, bool) if m is None else m.reshape(-1)


@dataclass
class Aggregate:
    arrays: dict[str, np.ndarray]
    counts: dict[str, np.ndarray]  # per-parameter number of contributors (float params only)

    @property
    def coverage(self) -> float:
        """Fraction of float parameters with at least one contributor."""
        total = sum(c.size for c in self.counts.values())
        covered = sum(int(np.count_nonzero(c)) for c in self.counts.values())
        return covered / total if total else 0.0


def is_averaged(arr: np.ndarray) -> bool:
    return bool(np.issubdtype(arr.dtype, np.floating))


def masked_mean(global_arrays: dict[str, np.ndarray], contributions: list[Contribution], server_lr: float = 1.0) -> Aggregate:
    """Aggregate ``contributions`` into new global arrays; see the module docstring."""
    new: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    for name, g in global_arrays.items():
        if not is_averaged(g):
            new[name] = g.copy()
            continue
        flat = g.reshape(-1).astype(np.float64)
        num = np.zeros(flat.size)
        den = np.zeros(flat.size)
        cnt = np.zeros(flat.size, np.int64)
        for c in contributions:
            m = c.mask_of(name, flat.size)
            if m is None or c.weight <= 0:
                continue
            vals = c.values[name].reshape(-1).astype(np.float64)
            num[m] += c.weight * vals
            den[m] += c.weight
            cnt[m] += 1
        covered = den > 0
        avg = np.where(covered, num / np.where(covered, den, 1.0), flat)
        new[name] = (flat - server_lr * (flat - avg)).reshape(g.shape).astype(g.dtype)
        counts[name] = cnt.reshape(g.shape)
    return Aggregate(new, counts)
