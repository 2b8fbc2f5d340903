"""Engine workers (run-config ``engine-workers`` > 1): the in-process engine's client messages on Ray actors.

``RayGrid`` is the in-process ``LocalGrid`` whose messages are run by ``engine-workers`` Ray
actors instead of this process; the server loop, the messages and the order of the replies are
unchanged, so rows and model are bit-identical to one worker with ``client-batch = 1``. Each
actor is itself a ``LocalGrid`` without a server (``EngineWorker``): the same ClientApp calls, and
its own batched executor where ``client-batch`` > 1. Each holds ``num-threads`` CPUs (its torch
threads) or, where clients train on CUDA, one GPU too; Ray spreads the actors over the cluster's
nodes (``SPREAD``) within those resources.

Assignment is fixed: the node in position ``i`` (partition order) goes to live worker
``i mod W``. Context.state stays here, in the driver: each message takes its node's state to the
worker and the reply brings the records back (a record the client kept unchanged comes back as
its name only, so the checkpoint's ContextState sees it as unchanged). So a client's state
follows its partition to whichever worker trains it, and a dead worker loses none of it. The
disk store (``state-store = disk`` or a node's ``state-dir``) is written by the worker on its
own node: on one machine that is the same folder; across machines the run-dir (or state-dir)
must be a folder every node mounts (docs/engine-workers.md).

Each send gives every worker its share of the messages in one call (a streaming Ray generator:
the driver serialises the share, and the global model it holds once, then waits idle); the
worker sends the replies it has made back at least every ``FLUSH_SECONDS`` and at the end (with
``client-batch`` > 1, a round's train messages once its batched executor has run them all).
Per-message Ray calls and objects cost more than digits clients' training, and the workers run at
the driver's priority, not Ray's default 15 nice levels below it (docs/results.md, "Engine
workers").

Faults: a worker that dies costs the messages whose replies it had not sent: each is that
client's failure (error reply, named in the round's failed_pids), not retried, because a client
that kills its worker (out of memory, a crash in native code) would kill the retry too. As in
one process, ``round-timeout`` is not applied: every live worker is waited for (Ray reports a
dead one at once). Before the next message the dead worker is replaced; a replacement Ray cannot
place within ``RESTART_TIMEOUT`` is dropped and its nodes go to the other workers; with none
left the run stops with one line (``EngineWorkersLost``) and ``resume = true`` continues from
the last checkpoint. When a worker dies the driver also checks the cluster's GCS (``cluster_gone``):
a cluster gone stops the run at once, the interrupted round unrecorded.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from flwr.app import ArrayRecord, Error, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp

from fedapp.core.config import ConfigError
from fedapp.engine.local_grid import LocalGrid

log = logging.getLogger("flwr")

RESTART_TIMEOUT = 60.0  # seconds a replacement worker may take to start
FLUSH_SECONDS = 1.0  # a worker sends the replies it has made at least this often (EngineWorker.run)
GCS_GRACE = 10.0  # seconds the cluster's GCS may refuse connections before the cluster counts as gone
WORKER_DIED = 503  # the Error code of a message whose worker died

Shipped = list[tuple[str, bool, Any]]  # a Context.state: (name, kept, the record or, where kept, the name it had)


class EngineWorkersLost(RuntimeError):
    """No engine worker could be started: the Ray cluster is gone or full."""


def start_local_ray(cpus: int) -> None:
    """A new Ray on this machine (never another one running here) with ``cpus`` CPUs, whose workers
    run at this process's priority: Ray's default ``worker_niceness`` (15 above the raylet's) would
    let every other busy process on the machine, the idle driver's Ray processes included, come
    before the engine workers, which do all the training."""
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING, _system_config={"worker_niceness": 0})


def cluster_gone(grace: float = GCS_GRACE) -> str:
    """The GCS address (``host:port``) of a Ray cluster that is gone, else "": its GCS (the head)
    refused connections for ``grace`` seconds. Checked as soon as a worker dies, because Ray ends
    a driver that cannot reach the GCS for 60 s, before a replacement worker's start could time out
    (a GCS restarted within ``grace``, with GCS fault tolerance, counts as alive)."""
    address = str(getattr(ray.get_runtime_context(), "gcs_address", "") or "")
    if ":" not in address:  # a Ray Client driver (ray://) has none: the workers' own errors decide
        return ""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + grace
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2.0):
                return ""
        except OSError:
            if time.monotonic() >= deadline:
                return address
            time.sleep(0.5)


def ship_back(state: RecordDict, before: Mapping[str, Any]) -> Shipped:
    """``state`` after a call: an ArrayRecord the call left in place as the name it had before, the rest as is."""
    names = {id(rec): name for name, rec in before.items()}
    out: Shipped = []
    for name, rec in state.items():
        old = names.get(id(rec))
        kept = isinstance(rec, ArrayRecord) and old is not None and before[old] is rec
        out.append((name, kept, old if kept else rec))
    return out


def take_back(state: RecordDict, shipped: Shipped) -> None:
    """Set ``state`` (in place) to what the worker sent back, reusing this side's kept records."""
    new = {name: (state[value] if kept else value) for name, kept, value in shipped}
    for name in list(state.keys()):
        del state[name]
    for name, rec in new.items():
        state[name] = rec


def merge_notes(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``client_batch`` notes of several workers as one row (chunks in worker order, counts summed)."""
    out: dict[str, Any] = {"chunks": [], "one_at_a_time": {}, "splits": []}
    for part in parts:
        out["chunks"] += part.get("chunks", [])
        out["splits"] += part.get("splits", [])
        for reason, n in part.get("one_at_a_time", {}).items():
            out["one_at_a_time"][reason] = out["one_at_a_time"].get(reason, 0) + n
    out["one_at_a_time"] = dict(sorted(out["one_at_a_time"].items()))
    return out


class EngineWorker:
    """One Ray actor: a ``LocalGrid`` (same nodes, same node configs) that runs the messages it is sent.
    ``setup`` gives it a run's; an idle worker is set up again for the next run in the same Ray session."""

    def __init__(self) -> None:
        self.grid: LocalGrid | None = None

    def setup(
        self, client_app: ClientApp, run_config: Mapping[str, Any], num_nodes: int, node_configs: list[dict[str, Any]] | None
    ) -> None:
        self.close()
        self.grid = LocalGrid(client_app, run_config, num_nodes, node_configs)

    def where(self) -> tuple[str, int]:
        """This worker's node address and process id."""
        return ray.util.get_node_ip_address(), os.getpid()

    def run(self, messages: list[Message], states: list[RecordDict], batch: bool) -> Iterator[Any]:
        """Run a worker's share of a send. Yields lists of ``(position, reply, state shipped back,
        client seconds)``, then the ``client_batch`` notes. One at a time, the replies made so far leave
        once ``FLUSH_SECONDS`` have passed since the last sent (and at the end): a worker that dies loses
        its unfinished messages and at most that many seconds of finished ones, and a round of short
        clients costs one Ray object per worker, not one per message. ``batch`` (a round's train
        messages, ``client-batch`` > 1): the batched executor runs them all, then they leave together."""
        assert self.grid is not None, "setup first"
        grid = self.grid
        done: list[tuple[int, Message, Shipped, float]] = []
        if batch:
            befores = [self._hand(grid, m, s) for m, s in zip(messages, states, strict=True)]
            start = grid.client_seconds
            replies = list(grid.send_and_receive(messages))
            seconds = grid.client_seconds - start
            for i, (msg, reply, before) in enumerate(zip(messages, replies, befores, strict=True)):
                done.append((i, reply, ship_back(grid.contexts[msg.metadata.dst_node_id].state, before), seconds if i == 0 else 0.0))
        else:
            sent = time.monotonic()
            for i, (msg, state) in enumerate(zip(messages, states, strict=True)):
                before, start = self._hand(grid, msg, state), grid.client_seconds
                reply = grid._deliver(msg)  # as one process delivers a message outside a batched round
                done.append((i, reply, ship_back(grid.contexts[msg.metadata.dst_node_id].state, before), grid.client_seconds - start))
                if time.monotonic() - sent >= FLUSH_SECONDS:
                    yield done
                    done, sent = [], time.monotonic()
        if done:
            yield done
        yield grid.round_notes().get("client_batch", {})

    @staticmethod
    def _hand(grid: LocalGrid, msg: Message, state: RecordDict) -> dict[str, Any]:
        """Give the message's node the state the driver sent; return its records as they were."""
        grid.contexts[msg.metadata.dst_node_id].state = state
        return dict(state.items())

    def close(self) -> None:
        if self.grid is not None:
            self.grid.close()
            self.grid = None


IDLE: dict[tuple[str, int, int], list[Any]] = {}  # (Ray job, CPUs, GPUs) -> workers a closed RayGrid left running


def take_idle(key: tuple[str, int, int]) -> Any | None:
    """A worker an earlier run of this Ray session left (start-up is seconds per worker), else None."""
    for stale in [k for k in IDLE if k[0] != key[0]]:  # a Ray session since shut down
        del IDLE[stale]
    idle = IDLE.get(key, [])
    return idle.pop(0) if idle else None


@dataclass
class Slot:
    """A worker's actor, where it runs, and whether it died."""

    actor: Any
    ip: str = ""
    pid: int = 0
    dead: bool = False

    @property
    def where(self) -> str:
        return f"{self.ip} pid {self.pid}"


def worker_count(setting: str, num_threads: int, use_gpus: bool, resources: Mapping[str, float]) -> int:
    """How many workers ``engine-workers`` asks for, checked against the cluster's resources."""
    cpus, gpus = int(resources.get("CPU", 0)), int(resources.get("GPU", 0))
    count = (gpus if use_gpus else cpus // num_threads) if setting == "auto" else int(setting)
    if count < 1 or count * num_threads > cpus or (use_gpus and count > gpus):
        need = f"{count} x {num_threads} CPUs" + (f" and {count} GPUs" if use_gpus else "")
        raise ConfigError(
            f"engine-workers = {setting!r}: {need} (num-threads CPUs{' and one GPU' if use_gpus else ''} per worker) do not fit "
            f"the Ray cluster's {cpus} CPUs and {gpus} GPUs; ask for fewer workers or fewer num-threads"
        )
    return count


def wants_gpus(device: str, resources: Mapping[str, float]) -> bool:
    """Whether each worker takes a GPU: clients train on CUDA (``cuda``, or ``auto`` where the cluster has GPUs)."""
    if device.startswith("cuda:"):
        raise ConfigError(
            f"device = {device!r} with engine-workers > 1: each worker has its own GPU, which it sees as cuda; use device = cuda or auto"
        )
    return device == "cuda" or (device == "auto" and resources.get("GPU", 0) >= 1)


class RayGrid(LocalGrid):
    """``LocalGrid`` whose client messages run on Ray actors (module docstring)."""

    def __init__(
        self, client_app: ClientApp, run_config: Mapping[str, Any], num_nodes: int, node_configs: list[dict[str, Any]] | None = None
    ):
        super().__init__(client_app, run_config, num_nodes, node_configs)
        if self.executor is not None:  # the workers batch; this process trains nothing
            self.executor.close()
            self.executor = None
        self.batched = str(run_config.get("client-batch", "1")) != "1"
        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            address = str(run_config.get("ray-address", ""))
            if address:
                ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
            else:
                start_local_ray(os.cpu_count() or 1)
        try:
            resources = ray.cluster_resources()
            threads = int(run_config.get("num-threads", 1))
            self.gpus = wants_gpus(str(run_config.get("device", "auto")), resources)
            count = worker_count(str(run_config.get("engine-workers", "1")), threads, self.gpus, resources)
            self.key = (ray.get_runtime_context().get_job_id(), threads, 1 if self.gpus else 0)
            self.remote = ray.remote(EngineWorker).options(  # type: ignore[attr-defined]
                num_cpus=threads, num_gpus=self.key[2], scheduling_strategy="SPREAD", max_restarts=0
            )
            self.setup_args = (client_app, dict(run_config), num_nodes, node_configs)
            self.slots = [Slot(take_idle(self.key) or self.remote.remote()) for _ in range(count)]
            for slot in self.slots:
                self._locate(slot, RESTART_TIMEOUT * 5)  # the first start includes the workers' imports
        except BaseException:
            self.close()
            raise
        self.position = {node_id: i for i, node_id in enumerate(self.contexts)}
        self.notes: list[dict[str, Any]] = []
        self.trained_on: dict[str, str] = {}
        log.info("engine-workers: %d Ray workers at %s", count, ", ".join(s.where for s in self.slots))

    def _locate(self, slot: Slot, timeout: float) -> None:
        """Set the worker up for this run; wait until it is; note its node address and process id."""
        ray.get(slot.actor.setup.remote(*self.setup_args), timeout=timeout)
        slot.ip, slot.pid = ray.get(slot.actor.where.remote(), timeout=timeout)

    def revive(self) -> None:
        """Replace dead workers; drop those Ray cannot place; none left: EngineWorkersLost."""
        if not any(s.dead for s in self.slots):
            return
        self.check_cluster()
        alive = []
        for i, slot in enumerate(self.slots):
            if slot.dead:
                old = slot.where
                try:
                    slot = Slot(self.remote.remote())
                    self._locate(slot, RESTART_TIMEOUT)
                    log.warning("engine-workers: worker %d (%s) died; replaced by %s", i, old, slot.where)
                except Exception as err:
                    ray.kill(slot.actor)
                    log.warning("engine-workers: worker %d (%s) died and cannot be replaced (%s); its nodes go to the others", i, old, err)
                    continue
            alive.append(slot)
        self.slots = alive
        if not alive:
            raise EngineWorkersLost(
                "engine-workers: every Ray worker died and none could be started again (is the Ray cluster gone?); "
                "resume = true continues from the last checkpointed round"
            )

    def check_cluster(self) -> None:
        """Raise EngineWorkersLost, every worker marked dead, where the Ray cluster is gone."""
        gone = cluster_gone()
        if gone:
            for slot in self.slots:
                slot.dead = True
            raise EngineWorkersLost(
                f"engine-workers: the Ray cluster is gone (its GCS at {gone} refuses connections), and every worker with it; "
                "resume = true continues from the last checkpointed round"
            )

    def round_notes(self) -> dict[str, Any]:
        """The row's ``engine_workers`` (partition -> the worker that ran its train message) and, with
        ``client-batch`` > 1, the workers' ``client_batch`` notes merged."""
        out: dict[str, Any] = {"engine_workers": dict(sorted(self.trained_on.items(), key=lambda kv: int(kv[0])))}
        if self.batched:
            out["client_batch"] = merge_notes(self.notes)
        self.notes, self.trained_on = [], {}
        return out

    def worker_of(self, msg: Message) -> int:
        return self.position.get(msg.metadata.dst_node_id, 0) % len(self.slots)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for reply in self.send_and_receive(messages):
            key = str(next(self._ids))
            self._pending[key] = reply
            ids.append(key)
        return ids

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = self.stamp(messages)  # ids before the messages travel: a worker's replies name them
        self.revive()
        replies: list[Message | None] = [None] * len(messages)
        known = []
        for i, m in enumerate(messages):
            if m.metadata.dst_node_id in self.contexts:
                known.append(i)
            else:
                replies[i] = self._deliver(m)  # 404, as one process answers it
        whole = self.batched and bool(messages) and all(m.metadata.message_type == MessageType.TRAIN for m in messages)
        shares: dict[int, list[int]] = {}  # message positions per worker: one call each
        for i in known:
            shares.setdefault(self.worker_of(messages[i]), []).append(i)
        calls = []
        for w, share in shares.items():
            msgs = [messages[i] for i in share]
            states = [self.contexts[m.metadata.dst_node_id].state for m in msgs]
            calls.append((w, share, self.slots[w].actor.run.options(num_returns="streaming").remote(msgs, states, whole)))
        for w, share, stream in calls:
            slot = self.slots[w]
            try:
                for ref in stream:  # no timeout, as one process waits for every client
                    item = ray.get(ref)
                    if isinstance(item, dict):
                        self.notes.append(item)
                        continue
                    for pos, reply, shipped, seconds in item:
                        i, msg = share[pos], messages[share[pos]]
                        take_back(self.contexts[msg.metadata.dst_node_id].state, shipped)
                        replies[i] = reply
                        self.client_seconds += seconds
                        if msg.metadata.message_type == MessageType.TRAIN:
                            self.trained_on[str(self.contexts[msg.metadata.dst_node_id].node_config["partition-id"])] = f"{w}@{slot.ip}"
            except Exception as err:
                slot.dead = True
                why = f"engine worker {w} ({slot.where}) lost the message: {type(err).__name__}: {str(err).strip()[:200]}"
                for i in share:
                    if replies[i] is None:
                        replies[i] = Message(Error(code=WORKER_DIED, reason=why), reply_to=messages[i])
        if any(self.slots[w].dead for w in shares):
            self.check_cluster()  # a round the cluster's end interrupted is not a round of failed clients
        return [r for r in replies if r is not None]

    def close(self) -> None:
        """Stop the local Ray where this grid started it; else keep the live workers for the next run."""
        slots, self.slots = getattr(self, "slots", []), []
        if self.started_ray:
            ray.shutdown()  # also the processes of a start that failed half-way
            return
        for slot in slots:
            if slot.dead:
                continue
            try:
                ray.get(slot.actor.close.remote(), timeout=RESTART_TIMEOUT)
                IDLE.setdefault(self.key, []).append(slot.actor)
            except Exception:  # died after its last message
                ray.kill(slot.actor)
