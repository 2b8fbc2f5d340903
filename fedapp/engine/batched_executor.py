"""The in-process engine's batched client executor (run-config ``client-batch`` > 1).

A round's train messages go through the ClientApp exactly as one at a time (decode, the
method's client policy, state store, reply encoding, metrics), each on its own *lane*: a
worker thread the engine steps explicitly, so only one lane ever runs at a time. A client
policy hands its local training to the park point, ``seam.park(call)``; on a lane that is
``Lane.handle``, which parks the lane with the call and hands control back. Once every lane of
a wave has parked or finished, the engine groups the parked calls by type and by their
kernel's key (``seam.Kernel``: registered by the family that defines the call type), trains
each group with the kernel, and resumes the lanes one after another; each finishes its call
(``kernel.finish``: the trained weights into its own model) and continues its policy where it
stopped. A policy that trains twice (e.g. a personal then a shared pass per epoch)
parks twice. The engine imports no method and names none.

A call without a kernel, or that its kernel's ``why_not`` refuses (e.g. a model with dropout
or unknown buffers), runs ``call.run_here()`` on its lane at once; so does every method whose
local loop does not go through ``seam.park``. Each reason is logged once per engine.

Nothing falls back silently. A chunk counts as batched only once the kernel has returned. A
chunk whose kernel call raises gives its clients back their generators' states; run-config
``batch-fallback`` then trains them one at a time (``sequential``) or stops the run
(``error``, BatchFallbackError). A CUDA out-of-memory splits the chunk in halves and retries.
Every round's metrics row says what happened (``client_batch``: the chunks the kernel trained,
the local-training calls run one at a time by reason, the splits).

A client that raises SystemExit or KeyboardInterrupt on its lane stops the run as one at a
time does: the exception is raised again on the engine's thread, and the lanes still parked
are unwound (LaneClosed), never left waiting.

Memory follows the wave: at most ``client-batch`` messages are in flight, whatever the
federation's size.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from flwr.app import Message

from fedapp.batched.seam import Call, Kernel, kernel_for, open_door
from fedapp.engine.client_batch_size import AutoSize, auto_size

log = logging.getLogger("flwr")


class BatchFallbackError(RuntimeError):
    """``batch-fallback = error``: the batched kernel failed on a chunk, and the run stops naming it."""


class LaneClosed(BaseException):
    """Raised in a parked lane when the engine closes it: unwinds the client's call without running
    the rest of it (a BaseException, so the ClientApp's ``except Exception`` lets it through)."""


@dataclass
class RoundNotes:
    """What the batched executor did with a round's train messages (metrics row key ``client_batch``)."""

    chunks: list[int] = field(default_factory=list)  # sizes of the chunks the kernel trained, counted after it returned
    one_at_a_time: dict[str, int] = field(default_factory=dict)  # reason -> local-training calls trained one at a time
    splits: list[str] = field(default_factory=list)  # chunks split after a CUDA out-of-memory

    def count(self, reason: str, calls: int = 1) -> None:
        self.one_at_a_time[reason] = self.one_at_a_time.get(reason, 0) + calls

    def row(self) -> dict[str, Any]:
        return {"chunks": list(self.chunks), "one_at_a_time": dict(sorted(self.one_at_a_time.items())), "splits": list(self.splits)}


class Lane:
    """A worker thread that runs one ClientApp call at a time and parks at its local training.

    ``_run`` lets the lane go on; ``_back`` gives control back to the engine. The engine
    releases ``_run`` and waits on ``_back``, so lane and engine never run at once."""

    def __init__(self, deliver: Callable[[Message], Message], fallback: Callable[[str], None]):
        self.deliver, self.fallback = deliver, fallback
        self._run, self._back = threading.Semaphore(0), threading.Semaphore(0)
        self.msg: Message | None = None
        self.reply: Message | None = None
        self.call: Call | None = None
        self.parked = 0  # how often the current message parked
        self.fits = 0  # how often the current message's client reached local training
        self.closed = False
        self.error: BaseException | None = None  # what the call raised past the ClientApp (SystemExit), for the engine
        self._thread = threading.Thread(target=self._loop, name="fedapp-client-lane", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from fedapp.client.cache import drop_thread_models

        open_door(self.handle)
        while True:
            self._run.acquire()
            if self.closed:
                break
            msg, self.msg = self.msg, None
            try:
                assert msg is not None
                self.reply = self.deliver(msg)
            except LaneClosed:
                break
            except BaseException as err:  # SystemExit, KeyboardInterrupt: raised again on the engine's thread (step)
                self.error = err
            self._back.release()
        drop_thread_models()
        self._back.release()

    def start(self, msg: Message) -> None:
        """Run ``msg`` until its client parks at local training or the reply is ready."""
        self.msg, self.reply, self.call, self.parked, self.fits = msg, None, None, 0, 0
        self.step()

    def step(self) -> None:
        self._run.release()
        self._back.acquire()
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def close(self) -> None:
        """End the thread; a parked call is unwound (LaneClosed), not finished."""
        if not self.closed:
            self.closed = True
            self._run.release()
            self._back.acquire()

    def handle(self, call: Call) -> Any:
        """The lane's park point (``seam.park``): the call's result, from its kernel with the other parked
        clients, or from ``call.run_here()`` where it has no kernel, its kernel cannot reproduce it, or failed."""
        self.fits += 1
        kernel = kernel_for(call)
        reason = f"no batched kernel for {type(call).__name__}" if kernel is None else kernel.why_not(call)
        if reason is not None or kernel is None:
            self.fallback(str(reason))
            return call.run_here()
        self.park(call)
        if call.outcome is None:
            return call.run_here()
        return kernel.finish(call, call.outcome)

    def park(self, call: Call) -> None:
        """Hand ``call`` to the engine, which trains it with the other parked clients and sets its outcome."""
        self.call = call
        self.parked += 1
        self._back.release()
        self._run.acquire()
        self.call = None
        if self.closed:
            raise LaneClosed


@dataclass
class BatchedExecutor:
    """Trains a round's train messages ``client_batch`` at a time (None: ``auto``, sized anew each
    round for the nodes' devices)."""

    deliver: Callable[[Message], Message]
    run_config: Mapping[str, Any]
    client_batch: int | None
    node_configs: Sequence[Mapping[str, Any]] = ()
    lanes: list[Lane] = field(default_factory=list)
    said: set[str] = field(default_factory=set)
    notes: RoundNotes = field(default_factory=RoundNotes)

    def once(self, text: str) -> None:
        if text not in self.said:
            self.said.add(text)
            log.info("client-batch: %s", text)

    def fallback(self, reason: str) -> None:
        self.notes.count(reason)
        self.once(f"trains one client at a time where the local training has {reason}")

    def take_notes(self) -> dict[str, Any]:
        """The train messages since the last call, as the round's row reports them; starts anew."""
        notes, self.notes = self.notes, RoundNotes()
        return notes.row()

    auto_min: int = 1  # auto: rounds with fewer train messages go one at a time

    sizes: list[AutoSize] | None = None  # auto: one per device the nodes train on, made at first use

    def size(self) -> int:
        if self.client_batch is None and self.sizes is None:
            devices = {str(c.get("device") or ""): c for c in self.node_configs} or {"": {}}
            self.sizes = [auto_size(self.run_config, c) for c in devices.values()]
        if self.sizes is not None:  # free device memory read again for every round
            picks = [s.pick() for s in self.sizes]
            self.client_batch, self.auto_min = min(p[0] for p in picks), max(p[1] for p in picks)
            self.once(f"auto picked {self.client_batch} clients per chunk, for rounds of at least {self.auto_min} clients")
        assert self.client_batch is not None
        return self.client_batch

    def run(self, messages: Sequence[Message]) -> list[Message]:
        """Replies in message order, each from the same client code as one at a time."""
        size = self.size()
        if size == 1 or len(messages) < self.auto_min:
            why = "auto picked 1 client per chunk" if size == 1 else f"auto: a round of fewer than {self.auto_min} clients"
            self.notes.count(why, len(messages))
            return [self.deliver(m) for m in messages]
        try:
            return self.waves(messages, size)
        except BaseException:  # a kernel error with batch-fallback = error, a client's SystemExit: no lane is left parked
            self.close()
            raise

    def waves(self, messages: Sequence[Message], size: int) -> list[Message]:
        while len(self.lanes) < min(size, len(messages)):
            self.lanes.append(Lane(self.deliver, self.fallback))
        on_fail = str(self.run_config.get("batch-fallback", "sequential"))
        replies: list[Message] = []
        for first in range(0, len(messages), size):
            wave = messages[first : first + size]
            lanes = self.lanes[: len(wave)]
            for lane, msg in zip(lanes, wave, strict=True):
                lane.start(msg)
            if any(lane.fits == 0 for lane in lanes):
                method = self.run_config.get("method", "the method")
                self.once(f"{method} trains one client at a time where its local loop does not go through the park point (seam.park)")
            while parked := [lane for lane in lanes if lane.call is not None]:
                train_parked([lane.call for lane in parked if lane.call is not None], self.once, self.notes, on_fail)
                for lane in parked:
                    lane.step()
            for lane in lanes:
                if lane.fits == 0 and lane.reply is not None and not lane.reply.has_error():
                    self.notes.count("the method's own loop, or no local training (e.g. a stopped client)")
            replies.extend(lane.reply for lane in lanes if lane.reply is not None)
        return replies

    def close(self) -> None:
        for lane in self.lanes:
            lane.close()
        self.lanes.clear()


def train_parked(calls: Sequence[Call], say: Callable[[str], None], notes: RoundNotes | None = None, on_fail: str = "sequential") -> None:
    """Train the parked calls in vectorised chunks: one chunk per call type and kernel key."""
    groups: dict[tuple[Any, ...], list[Call]] = {}
    for call in calls:
        groups.setdefault((type(call), kernel_of(call).key(call)), []).append(call)
    for group in groups.values():
        train_chunk(group, say, RoundNotes() if notes is None else notes, on_fail)


def kernel_of(call: Call) -> Kernel:
    kernel = kernel_for(call)
    if kernel is None:  # Lane.handle runs such a call on its lane: it never parks
        raise TypeError(f"no batched kernel is registered for {type(call).__name__}")
    return kernel


def kernel(group: Sequence[Call]) -> list[Any]:
    """The batched kernel's outcome for each call of one chunk (calls of one type and key)."""
    return kernel_of(group[0]).train(group)


def train_chunk(group: Sequence[Call], say: Callable[[str], None], notes: RoundNotes, on_fail: str) -> None:
    """One chunk through the kernel. Its calls get outcomes only once the kernel has returned; on an
    out-of-memory it is split in halves and each retried (outside the ``except``, so the failed
    attempt's frames and tensors are freed first); any other failure (or an out-of-memory of one
    client) is ``on_fail``'s: ``sequential`` leaves the calls to train one at a time from their
    generators' states before, ``error`` raises BatchFallbackError."""
    what = kernel_of(group[0]).what
    states = [c.gen.get_state() for c in group]
    out_of_memory = ""
    try:
        outcomes = kernel(group)
    except torch.OutOfMemoryError as err:
        out_of_memory = one_line(err)
    except Exception as err:
        restore(group, states)
        fail(group, what, one_line(err), say, notes, on_fail, err)
        return
    if out_of_memory:
        restore(group, states)
        if len(group) == 1:
            fail(group, what, out_of_memory, say, notes, on_fail, None)
            return
        half = (len(group) + 1) // 2
        notes.splits.append(f"{len(group)} -> {half} + {len(group) - half} (out of memory)")
        say(f"a {what} of {len(group)} clients ran out of device memory; it is split and retried")
        train_chunk(group[:half], say, notes, on_fail)
        train_chunk(group[half:], say, notes, on_fail)
        return
    for c, outcome in zip(group, outcomes, strict=True):
        c.outcome = outcome
    notes.chunks.append(len(group))


def one_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:200]}" if text else type(err).__name__


def restore(group: Sequence[Call], states: Sequence[torch.Tensor]) -> None:
    """Each client's generator back to its state before the kernel drew from it."""
    for c, state in zip(group, states, strict=True):
        c.gen.set_state(state)


def fail(
    group: Sequence[Call], what: str, why: str, say: Callable[[str], None], notes: RoundNotes, on_fail: str,
    cause: BaseException | None,
) -> None:  # fmt: skip
    """A chunk the kernel could not train: stop the run (``error``) or count it and leave its calls to train one at a time."""
    if on_fail == "error":
        raise BatchFallbackError(
            f"client-batch: the batched kernel failed on a {what} of {len(group)} clients ({why}); batch-fallback = 'error' "
            "stops the run ('sequential' trains such a chunk one client at a time)"
        ) from cause
    notes.count(f"the batched kernel failed ({why})", len(group))
    say(f"a {what} failed in the batched kernel ({why}); its clients train one at a time")
