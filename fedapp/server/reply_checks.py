"""What a node's reply may carry and what its numbers may say, checked before anything in it
is decoded or averaged.

The server trusts nothing a reply says about itself that it can check (a malicious or broken
node must not poison or crash the run):

* Records: only the names the task allows (``values``, ``mask``, ``metrics`` and the method's
  own, ``ServerPolicy.reply_records``), each of the right record type; an unknown record is
  refused by name and size, never decoded. Every array's serialised size is bounded by what
  the task can legitimately return before it is turned into numpy.
* Metrics: a MetricRecord of at most ``MAX_METRICS`` scalar entries.
* Partition: the reply's ``partition-id`` is the one whose task went to the replying node.
* Sample count: ``num-examples`` is a whole number in 1..(the partition's training samples);
  the split is deterministic in the run-config, so the server knows every partition's size.
* Coverage: the reply covers only the entries its task gave it (``within_task``: the method's
  ``upload_allowed``, e.g. FedPart's layer group, a personalised client's global part, a
  sub-model's kept neurons).
* Step size ("exploding"): no entry of a reply moves further from the global model than
  ``MAX_STEP`` times the tensor's scale, max(1, largest |entry| of that tensor in the
  *initial* model): the strategy keeps it from round 1, so an aggregate a client has pushed
  up cannot raise it. An honest local run moves weights by lr x steps x gradient, orders of
  magnitude below that bound (docs/faults.md gives the largest ratio measured over every config
  in configs/); weights beyond it make the next rounds' forward passes overflow float32.
* Step outlier: no reply steps more than ``STEP_SPREAD`` times further than the round's median
  reply (a reply at or below the median never does, so only a minority can be flagged).
* Aggregate: finite, or not installed (the round keeps the previous model).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedapp.core.aggregate import Contribution, is_averaged
from fedapp.methods.base import RecordSpec

MAX_METRICS = 256  # honest replies carry about 20 (training, timing, energy)
MAX_KEY = 200  # characters of a metric name
NPY_HEADER = 1024  # bytes an .npy header may add to an array's data (numpy writes 128 for small shapes)
MAX_STEP = 1e4
STEP_SPREAD = 1e3  # a reply stepping this many times further than the round's median reply is an outlier


class ReplyError(ValueError):
    """A reply breaks what the server's task allows; the reply is that node's failure."""


def record_types(content: RecordDict, allowed: dict[str, type]) -> None:
    """Every record of ``content`` is one ``allowed`` names, of the record type it names."""
    for name, record in content.items():
        want = allowed.get(name)
        if want is None:
            size = record.count_bytes() if isinstance(record, ArrayRecord) else len(record)
            raise ReplyError(f"unknown record {name!r} ({type(record).__name__}, {size} entries/bytes) refused undecoded")
        if not isinstance(record, want):
            raise ReplyError(f"record {name!r} is a {type(record).__name__}, expected a {want.__name__}")


def metrics_of(content: RecordDict, name: str = "metrics") -> dict[str, float]:
    """The reply's metrics as floats: a MetricRecord of at most MAX_METRICS scalar entries."""
    record = content.get(name)
    if not isinstance(record, MetricRecord):
        raise ReplyError(f"no {name!r} MetricRecord (got {type(record).__name__})")
    if len(record) > MAX_METRICS:
        raise ReplyError(f"{len(record)} metrics, more than the {MAX_METRICS} allowed")
    out = {}
    for key, value in record.items():
        if len(key) > MAX_KEY:
            raise ReplyError(f"a metric name of {len(key)} characters (at most {MAX_KEY})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ReplyError(f"metric {key[:40]!r} is a {type(value).__name__}, expected a number")
        out[key] = float(value)
    return out


def partition_of(metrics: dict[str, float], node: int, sent: dict[int, int]) -> int:
    """The reply's ``partition-id``, which must be the partition whose task went to ``node``."""
    raw = metrics.get("partition-id")
    if raw is None or not math.isfinite(raw) or not raw.is_integer():
        raise ReplyError(f"partition-id {raw!r} is not a whole number")
    pid = int(raw)
    if sent.get(pid) != node:
        owner = [p for p, n in sent.items() if n == node]
        raise ReplyError(f"claims partition-id {pid}, but node {node} was sent the task of partition {owner[0] if owner else 'none'}")
    return pid


def sample_count(metrics: dict[str, float], size: int, split: str = "training") -> float:
    """``num-examples``: a whole number in 1..``size`` (the partition's samples in that split)."""
    n = metrics.get("num-examples")
    if n is None or not math.isfinite(n) or not n.is_integer() or not 1 <= n <= size:
        shown = "missing" if n is None else f"{n:g}"
        raise ReplyError(f"num-examples = {shown} is not allowed: the partition holds {size} {split} samples (expected 1..{size})")
    return n


def evaluation(metrics: dict[str, float], n: int) -> None:
    """A self-reported local evaluation that no model could produce on ``n`` samples: an accuracy
    that is not a whole number of correct samples out of n, or a mean cross-entropy below
    (1 - accuracy) x ln 2 (a misclassified sample gave its label at most probability 1/2). What a
    node makes up within these bounds cannot be told from an honest result (docs/faults.md)."""
    acc, loss = metrics["accuracy"], metrics.get("loss")
    correct = round(acc * n)
    if correct / n != acc:
        raise ReplyError(f"accuracy = {acc!r} is not a whole number of correct samples out of its {n} local test samples")
    if loss is not None and loss < (1.0 - acc) * math.log(2) * (1 - 1e-4):  # float32 rounding; NaN compares False
        raise ReplyError(f"loss = {loss!r} is below (1 - accuracy) x ln 2 = {(1.0 - acc) * math.log(2):.6g}: no model scores that")


def check_arrays(record: ArrayRecord, limits: dict[str, int], what: str) -> None:
    """Before decoding: every array is named in ``limits`` (its most bytes of data), numpy-serialised, not larger."""
    for name, arr in record.items():
        most = limits.get(name)
        if most is None:
            raise ReplyError(f"{what}: unexpected array {name[:80]!r} ({len(arr.data)} bytes) refused undecoded")
        if arr.stype != "numpy.ndarray":
            raise ReplyError(f"{what}/{name}: serialisation {arr.stype[:40]!r}, expected numpy.ndarray")
        if len(arr.data) > most + NPY_HEADER:
            raise ReplyError(f"{what}/{name}: {len(arr.data)} bytes, more than the {most} its task allows")


def decode_record(record: ArrayRecord, spec: RecordSpec, what: str) -> dict[str, np.ndarray]:
    """A method record checked against ``spec``: exactly its arrays, shapes and dtypes; floats finite."""
    if set(record) != set(spec):
        raise ReplyError(f"{what}: arrays {sorted(record)[:10]}, expected {sorted(spec)[:10]}")
    check_arrays(record, {n: math.prod(shape) * np.dtype(dtype).itemsize for n, (shape, dtype) in spec.items()}, what)
    out = {}
    for name, arr in record.items():
        value = arr.numpy()
        shape, dtype = spec[name]
        if not isinstance(value, np.ndarray) or value.shape != tuple(shape) or value.dtype != np.dtype(dtype):
            raise ReplyError(
                f"{what}/{name}: {getattr(value, 'dtype', type(value).__name__)} {getattr(value, 'shape', '')}, expected {dtype} {shape}"
            )
        if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
            raise ReplyError(f"{what}/{name}: non-finite values")
        out[name] = value
    return out


def scales(arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """Per float tensor: max(1, largest |entry|), the unit of the step bound."""
    return {k: max(1.0, float(np.abs(v).max(initial=0.0))) for k, v in arrays.items() if is_averaged(v)}


def tensor_steps(contribution: Contribution, global_np: dict[str, np.ndarray], scale: dict[str, float]) -> Iterator[tuple[str, float]]:
    """Per float tensor the reply sent: the largest distance of a sent entry from its global value."""
    for name, values in contribution.values.items():
        if name not in scale:
            continue
        ref = global_np[name].reshape(-1)
        mask = contribution.masks.get(name)
        base = ref if mask is None else ref[mask.reshape(-1)]
        yield name, float(np.abs(values.reshape(-1) - base).max(initial=0.0))  # an overflow to inf fails the bound, as it should


def reply_step(contribution: Contribution, global_np: dict[str, np.ndarray], scale: dict[str, float]) -> float:
    """Raise if some sent entry lies further than MAX_STEP x scale from its global value; else the
    reply's step: its largest entry step in units of that tensor's scale (0: it sent no float entry),
    what ``step_outliers`` compares across a round's replies."""
    worst = 0.0
    for name, step in tensor_steps(contribution, global_np, scale):
        if step > MAX_STEP * scale[name]:
            raise ReplyError(f"{name}: an entry moves by {step:.3g}, more than {MAX_STEP:g} x the tensor's scale {scale[name]:.3g}")
        worst = max(worst, step / scale[name])
    return worst


def within_task(contribution: Contribution, allowed: dict[str, np.ndarray] | None) -> None:
    """Raise if the reply covers an entry its task did not give it (``allowed``: the policy's
    ``upload_allowed``; None: any). A FedPart client sending every layer, a personalised client
    writing its personal coordinates, a sub-model client sending dropped neurons: on an entry no
    honest reply covers, that one node would set the global value."""
    if allowed is None:
        return
    outside: dict[str, int] = {}
    for name, values in contribution.values.items():
        ok = allowed.get(name)
        sent = contribution.masks.get(name)
        if ok is None:
            count = values.size
        elif sent is None:
            count = int(ok.size - np.count_nonzero(ok))
        else:
            count = int(np.count_nonzero(sent.reshape(-1) & ~ok.reshape(-1)))
        if count:
            outside[name] = count
    if outside:
        worst = sorted(outside.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        shown = ", ".join(f"{n}: {c}" for n, c in worst) + (", ..." if len(outside) > 3 else "")
        raise ReplyError(f"values: {sum(outside.values())} entries outside its task in {len(outside)} tensors ({shown})")


def step_outliers(steps: list[float]) -> dict[int, str]:
    """The replies (by index) whose step exceeds STEP_SPREAD x the round's median step, each with
    its reason. A reply at or below the median never qualifies, so fewer than half of the
    replies can: the majority is never flagged. With two replies the median is their mean, which
    no step exceeds STEP_SPREAD times; with a median step of 0 nothing is flagged."""
    if len(steps) < 3:
        return {}
    median = float(np.median(steps))
    if median <= 0:
        return {}
    return {
        i: f"step {s:.3g} is {s / median:.3g} x the round's median step {median:.3g} (at most {STEP_SPREAD:g} x)"
        for i, s in enumerate(steps)
        if s > STEP_SPREAD * median
    }


def aggregate_fault(new: dict[str, np.ndarray]) -> str | None:
    """Why the aggregate must not be installed, or None. Its step needs no second bound: every
    ``aggregation`` rule's value lies within its contributors' values (a weighted mean, a median
    or trimmed mean, or a mean of replies pulled toward the global model), so within MAX_STEP of
    the global model too, scaled by server-lr; what remains is float32 overflow (a large
    server-lr), which leaves inf or NaN."""
    for name, arr in new.items():
        if is_averaged(arr) and not np.isfinite(arr).all():
            return f"{name}: non-finite values"
    return None
