"""Robust masked aggregation (run-config ``aggregation``) and each client's anomaly score.

Replies cover different coordinates (FedPeWS masks, FedSelect's shared part, FedSPU/FjORD/FedDrop
sub-models, FedPart groups), so every statistic is taken per coordinate over *that
coordinate's contributors* (replies with weight > 0 that sent it); a coordinate nobody sent
keeps the global value, as in ``masked_mean``. Personal parts are never sent, so never touched.

* ``mean``: ``aggregate.masked_mean`` itself (the weighted mean; the default, bit-identical).
* ``median``: per coordinate, the median of its c contributors' values (c = 1: that value;
  c = 2: their mean). Unweighted: a sample count is the sender's own claim.
* ``trimmed-mean``: per coordinate, drop the t = floor(trim-fraction x c) lowest and highest
  values and average the rest, unweighted. Where t = 0 (fewer than 1 / trim-fraction
  contributors: trimming at that fraction removes nobody) the coordinate takes the median
  instead, so a coordinate is never an untrimmed mean of 3 or more values; with c <= 2 that
  median is the plain mean.
* ``norm-bound``: each reply's update (its values minus the global values at the coordinates
  it sent, all float tensors together) is scaled down to at most norm-bound-factor x the
  round's median update norm, then ``masked_mean`` (weighted) averages the bounded replies.

Every rule then moves the model the same way: x_g <- x_g - server_lr * (x_g - x_agg).

The anomaly score (every rule, ``mean`` included) says per client how its update compares to
the round: ``norm_ratio`` = its update norm / the median update norm, ``cosine`` = cosine
between its update and the aggregate's step over the coordinates it sent; ``trimmed`` (median,
trimmed-mean) = the share of its sent coordinates whose value did not enter the statistic;
``clip`` (norm-bound) = the factor its update was scaled by, where it was.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from fedapp.core.aggregate import Aggregate, Contribution, is_averaged, masked_mean

AGGREGATIONS = ("mean", "trimmed-mean", "median", "norm-bound")


def aggregate(
    kind: str, global_arrays: dict[str, np.ndarray], contributions: list[Contribution], server_lr: float = 1.0,
    trim_fraction: float = 0.2, norm_factor: float = 2.0,
) -> tuple[Aggregate, list[dict[str, Any]]]:  # fmt: skip
    """The new global arrays under rule ``kind``, and one anomaly score per contribution (in order;
    empty for a contribution of weight 0, which no rule counts)."""
    extra: list[dict[str, Any]] = [{} for _ in contributions]
    if kind == "mean":
        agg = masked_mean(global_arrays, contributions, server_lr)
    elif kind == "norm-bound":
        bounded = bound_norms(global_arrays, contributions, norm_factor)
        for i, (c, b) in enumerate(zip(contributions, bounded, strict=True)):
            if b is not c:
                extra[i]["clip"] = bounded_scale(global_arrays, c, b)
        agg = masked_mean(global_arrays, bounded, server_lr)
    elif kind in ("median", "trimmed-mean"):
        agg, trimmed = coordinate_wise(global_arrays, contributions, server_lr, None if kind == "median" else trim_fraction)
        for i, share in enumerate(trimmed):
            if share is not None:
                extra[i]["trimmed"] = share
    else:
        raise ValueError(f"unknown aggregation {kind!r}; expected one of {', '.join(AGGREGATIONS)}")
    scores = anomaly(global_arrays, contributions, agg.arrays)
    return agg, [{**s, **e} if s else {} for s, e in zip(scores, extra, strict=True)]


def flats(global_arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float tensors of the global model, flat (views, in their own dtype)."""
    return {k: g.reshape(-1) for k, g in global_arrays.items() if is_averaged(g)}


def updates(flat: dict[str, np.ndarray], c: Contribution) -> Iterator[tuple[str, np.ndarray, np.ndarray | None]]:
    """Per float tensor the contribution sent: its name, update (values - global at the sent
    coordinates, 1-D, in the tensor's dtype: the scores need no float64 copy of every reply) and flat mask."""
    for name, values in c.values.items():
        g = flat.get(name)
        if g is None:
            continue
        mask = c.masks.get(name)
        mask = None if mask is None else mask.reshape(-1)
        yield name, values.reshape(-1) - (g if mask is None else g[mask]), mask


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """``a . b`` in the arrays' dtype (fast), redone in float64 where float32 overflowed
    (still inf or NaN where an entry is: a non-finite aggregate, which is never installed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = float(np.dot(a, b))
        return out if math.isfinite(out) else float(np.dot(a.astype(np.float64), b.astype(np.float64)))


def update_norm(flat: dict[str, np.ndarray], c: Contribution) -> float:
    return math.sqrt(sum(dot(d, d) for _, d, _ in updates(flat, c)))


def bound_norms(global_arrays: dict[str, np.ndarray], contributions: list[Contribution], factor: float) -> list[Contribution]:
    """Each contribution whose update norm exceeds ``factor`` x the median norm (over contributions of
    weight > 0), with its update scaled down to that bound; the others unchanged (the same objects)."""
    flat = flats(global_arrays)
    norms = [update_norm(flat, c) if c.weight > 0 else 0.0 for c in contributions]
    live = [n for n, c in zip(norms, contributions, strict=True) if c.weight > 0]
    if not live:
        return list(contributions)
    bound = factor * float(np.median(live))
    out = []
    for c, norm in zip(contributions, norms, strict=True):
        if c.weight <= 0 or norm <= bound:
            out.append(c)
            continue
        s = bound / norm
        values = dict(c.values)
        for name, d, mask in updates(flat, c):
            base = flat[name] if mask is None else flat[name][mask]
            values[name] = (base + s * d).astype(c.values[name].dtype).reshape(c.values[name].shape)
        out.append(Contribution(c.weight, values, c.masks))
    return out


def bounded_scale(global_arrays: dict[str, np.ndarray], original: Contribution, bounded: Contribution) -> float:
    """The factor a contribution's update was scaled by (as sent after rounding to its dtype)."""
    flat = flats(global_arrays)
    before = update_norm(flat, original)
    return round(update_norm(flat, bounded) / before, 4) if before > 0 else 1.0


def coordinate_wise(
    global_arrays: dict[str, np.ndarray], contributions: list[Contribution], server_lr: float, trim_fraction: float | None
) -> tuple[Aggregate, list[float | None]]:
    """Per coordinate, the trimmed mean (``trim_fraction``; None: the median) of its contributors'
    values, and per contribution the share of its sent coordinates left out (None: sent nothing)."""
    new: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    left_out = np.zeros(len(contributions))
    sent = np.zeros(len(contributions))
    for name, g in global_arrays.items():
        if not is_averaged(g):
            new[name] = g.copy()
            continue
        flat = g.reshape(-1).astype(np.float64)
        who = [i for i, c in enumerate(contributions) if name in c.values and c.weight > 0]
        table = np.full((len(who), flat.size), np.nan)
        for row, i in enumerate(who):
            c = contributions[i]
            mask = c.masks.get(name)
            if mask is None:
                table[row] = c.values[name].reshape(-1)
            else:
                table[row, mask.reshape(-1)] = c.values[name].reshape(-1)
        avg, cnt, out_rows = trimmed_table(table, flat, trim_fraction)
        for row, i in enumerate(who):
            sent[i] += int(np.count_nonzero(~np.isnan(table[row])))
            left_out[i] += int(out_rows[row])
        new[name] = (flat - server_lr * (flat - avg)).reshape(g.shape).astype(g.dtype)
        counts[name] = cnt.reshape(g.shape)
    shares = [round(float(o / s), 4) if s > 0 else None for o, s in zip(left_out, sent, strict=True)]
    return Aggregate(new, counts), shares


def trimmed_table(table: np.ndarray, fallback: np.ndarray, trim_fraction: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column-wise statistic of ``table`` (contributors x coordinates, NaN where one did not
    contribute): per column with c values, the mean of the sorted values t..c-1-t, where
    t = floor(trim_fraction x c), or t = (c - 1) // 2 (the median) when that is 0 or
    ``trim_fraction`` is None. Returns the statistic (``fallback`` where c = 0), c per column,
    and per row how many of its values were left out."""
    k, size = table.shape
    cnt = np.count_nonzero(~np.isnan(table), axis=0).astype(np.int64)
    if k == 0:
        return fallback.copy(), cnt, np.zeros(0, np.int64)
    order = np.argsort(table, axis=0, kind="stable")  # NaN last; ties keep contributor order
    ordered = np.take_along_axis(table, order, axis=0)
    median_t = (cnt - 1) // 2
    if trim_fraction is None:
        t = median_t
    else:
        t = np.floor(trim_fraction * cnt).astype(np.int64)
        t = np.where(t == 0, median_t, t)
    rank = np.arange(k)[:, None]
    keep_sorted = (rank >= t) & (rank < cnt - t)
    kept = cnt - 2 * t
    total = np.where(keep_sorted, ordered, 0.0).sum(axis=0)
    avg = np.where(cnt > 0, total / np.maximum(kept, 1), fallback)
    keep = np.zeros((k, size), bool)
    np.put_along_axis(keep, order, keep_sorted, axis=0)
    out_rows = np.count_nonzero(~np.isnan(table) & ~keep, axis=1)
    return avg, cnt, out_rows


def anomaly(global_arrays: dict[str, np.ndarray], contributions: list[Contribution], new: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Per contribution of weight > 0: its update norm over the round's median (``norm_ratio``) and
    the cosine of its update to the aggregate's step over the coordinates it sent (0 where
    either is zero); ``{}`` for a contribution of weight 0."""
    flat = flats(global_arrays)
    with np.errstate(over="ignore", invalid="ignore"):
        step = {n: new[n].reshape(-1) - g for n, g in flat.items()}
    dense_sq = {n: dot(a, a) for n, a in step.items()}
    norms: list[float] = []
    cosines: list[float | None] = []
    for c in contributions:
        along = own = agg = 0.0
        for name, d, mask in updates(flat, c):
            a = step[name] if mask is None else step[name][mask]
            along += dot(d, a)
            own += dot(d, d)
            agg += dense_sq[name] if mask is None else dot(a, a)
        norms.append(math.sqrt(own))
        cosine = along / math.sqrt(own * agg) if own > 0 and agg > 0 else 0.0
        cosines.append(cosine if math.isfinite(cosine) else None)  # None (null): the aggregate was not finite
    live = [n for n, c in zip(norms, contributions, strict=True) if c.weight > 0]
    median = float(np.median(live)) if live else 0.0
    out: list[dict[str, Any]] = []
    for c, norm, cos in zip(contributions, norms, cosines, strict=True):
        if c.weight <= 0:
            out.append({})
            continue
        ratio = norm / median if median > 0 else (1.0 if norm == 0 else None)
        out.append({"norm_ratio": None if ratio is None else round(ratio, 4), "cosine": None if cos is None else round(cos, 4)})
    return out
