"""The one door between a client's local training and the batched engine: ``park(call)``.

A method's client code does not call its local loop directly: it builds a *call* (its
arguments, and ``run_here()``, the one-client loop) and hands it to :func:`park`. Outside the
in-process engine's batched executor (``client-batch`` 1, ``flwr run``, deployments) ``park``
runs ``call.run_here()`` at once. On an executor lane (``engine/batched_executor.py``) the lane
parks there: the engine groups the parked calls by their kernel's ``key`` and trains each
group with the kernel's ``train``, then each lane resumes with ``kernel.finish(call, outcome)``.

Which kernel trains a call is looked up by the call's type in a small registry, filled by the
module that defines the call type (``register``, at import: a call cannot exist before its
type's module ran). So the engine imports no method and names none, and a method that wants
its local loop batched adds, in its own family: a call type, a kernel, one ``register`` line,
and ``park(...)`` where it trained (docs/architecture.md, "Add a batched kernel").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import torch


class Call(Protocol):
    """A parked local-training call: enough to run it alone, and where its kernel outcome goes."""

    outcome: Any  # set by the engine once the kernel returned (None: train it one at a time)

    @property
    def gen(self) -> torch.Generator:
        """The client's generator: set back to its state before the kernel if the kernel raises."""
        ...

    def run_here(self) -> Any:
        """The one-client loop's result for this call (what ``park`` returns outside the engine)."""
        ...


@dataclass(frozen=True)
class Kernel:
    """How the engine trains many calls of one type together."""

    what: str  # how messages name a chunk of these calls, e.g. "chunk", "FedPeWS warm-up chunk"
    why_not: Callable[[Any], str | None]  # why this call must run alone (None: the kernel reproduces it)
    key: Callable[[Any], Hashable]  # what the calls of one chunk must share
    train: Callable[[Sequence[Any]], list[Any]]  # one outcome per call, in order
    finish: Callable[[Any, Any], Any]  # (call, outcome) -> what run_here would have returned; runs on the lane


_KERNELS: dict[type, Kernel] = {}


def register(call_type: type, kernel: Kernel) -> None:
    """Make ``kernel`` the one the engine uses for calls of exactly ``call_type``."""
    _KERNELS[call_type] = kernel


def kernel_for(call: Any) -> Kernel | None:
    return _KERNELS.get(type(call))


Door = Callable[[Any], Any]
_DOOR: ContextVar[Door | None] = ContextVar("fedapp_park_door", default=None)


def park(call: Call) -> Any:
    """Run ``call``'s local training: at once, or (on a batched executor's lane) with the other parked clients."""
    door = _DOOR.get()
    return call.run_here() if door is None else door(call)


def open_door(door: Door) -> None:
    """Make ``door`` this thread's (context's) park point: the batched executor's lanes, nothing else."""
    _DOOR.set(door)


@contextmanager
def alone() -> Iterator[None]:
    """Within: ``park`` runs each call at once, on a lane too (a train message that first scores the
    model it received trains that score one client at a time, as its evaluate message did)."""
    token = _DOOR.set(None)
    try:
        yield
    finally:
        _DOOR.reset(token)
