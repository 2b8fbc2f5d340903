"""LocalGrid: a Flower ``Grid`` that delivers messages to a ClientApp in this process.

The server loop, MaskedStrategy and the ClientApp run unchanged, with no Ray actor
or SuperLink in between, so seed sweeps of hundreds of rounds are cheap and the
bench can compare it against `flwr run`. Each simulated node keeps its own Context
(node_config with partition-id/num-partitions, and Context.state across rounds),
as Flower's simulation engine does. Uses Flower's internal ``TaskIdentity`` to
create messages outside a SuperLink (pinned flwr version; covered by tests).

With run-config ``client-batch`` other than 1, a round's train messages go to the batched
executor (``batched_executor.py``): the same ClientApp calls, with the clients' local
training run as vectorised chunks. Every other message is delivered one at a time.

Each message gets an id when it is sent (as Flower's grids give one when they push it), and a
reply that does not answer its message (another ``reply_to_message_id``, or another node as its
source) becomes that message's error reply: a client cannot answer for another node here, in the
batched lanes or on a Ray worker (fedapp.server.reply_binding checks the same on the server, for
every engine).
"""

from __future__ import annotations

import itertools
import time
import traceback
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from flwr.app import Context, Error, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from fedapp.core.config import RunConfig, parse
from fedapp.engine.context_state import ContextState, uses_context

if TYPE_CHECKING:
    from fedapp.engine.batched_executor import BatchedExecutor

SERVER_NODE_ID = 1
UNBOUND = 409  # error code of a reply that answered another message or came from another node


class LocalGrid(Grid):
    def __init__(
        self, client_app: ClientApp, run_config: Mapping[str, Any], num_nodes: int, node_configs: list[dict[str, Any]] | None = None
    ):
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, SERVER_NODE_ID, 1  # type: ignore[misc]
        self.client_app = client_app
        self._ids = itertools.count(1)
        self._message_ids = itertools.count(1)
        configs = node_configs or [{} for _ in range(num_nodes)]
        self.contexts: dict[int, Context] = {}
        for pid, extra in enumerate(configs):
            node_id = 1000 + pid
            node_config = {"partition-id": pid, "num-partitions": num_nodes, **extra}
            self.contexts[node_id] = Context(1, node_id, node_config, RecordDict(), dict(run_config))
        self._pending: dict[str, Message] = {}
        keeps = any(uses_context(run_config, c.node_config) for c in self.contexts.values())
        self.context_state = ContextState(self.contexts) if keeps else None  # saved with each checkpoint (server.rounds)
        self.client_seconds = 0.0  # time spent inside the ClientApp
        setting = parse(RunConfig, run_config).client_batch  # typed and checked: a bad value is named before any training
        self.executor: BatchedExecutor | None = None
        if setting != "1":  # torch and the batched kernel only where they are used
            from fedapp.engine.batched_executor import BatchedExecutor

            nodes = [c.node_config for c in self.contexts.values()]
            self.executor = BatchedExecutor(self._deliver, run_config, None if setting == "auto" else int(setting), nodes)

    def round_notes(self) -> dict[str, Any]:
        """The round's metrics row key ``client_batch`` (the batched executor's chunks, one-at-a-time
        calls by reason, out-of-memory splits) where ``client-batch`` is not 1; nothing otherwise."""
        return {} if self.executor is None else {"client_batch": self.executor.take_notes()}

    def close(self) -> None:
        """Stop the batched executor's lanes (threads), if any."""
        if self.executor is not None:
            self.executor.close()

    def set_run(self, run: Run) -> None:  # pragma: no cover - not used in-process
        pass

    @property
    def run(self) -> Run:  # pragma: no cover - not used in-process
        raise NotImplementedError("LocalGrid runs without a Flower Run object")

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str, ttl: float | None = None) -> Message:
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def stamp(self, messages: Iterable[Message]) -> list[Message]:
        """Give each message without an id one, as a grid does when it pushes it (Flower's own sets
        the private field the same way); replies name it in ``reply_to_message_id``."""
        messages = list(messages)
        for msg in messages:
            if not msg.metadata.message_id:
                msg.metadata.__dict__["_message_id"] = f"local-{next(self._message_ids)}"
        return messages

    def _deliver(self, msg: Message) -> Message:
        self.stamp([msg])
        reply = self._answer(msg)
        if reply.metadata.reply_to_message_id != msg.metadata.message_id or reply.metadata.src_node_id != msg.metadata.dst_node_id:
            why = f"reply names message {reply.metadata.reply_to_message_id[:40]!r} from node {reply.metadata.src_node_id}"
            reply = Message(Error(code=UNBOUND, reason=f"reply not bound to its message ({why}), refused"), reply_to=msg)
        return reply

    def _answer(self, msg: Message) -> Message:
        ctx = self.contexts.get(msg.metadata.dst_node_id)
        if ctx is None:
            return Message(Error(code=404, reason=f"no node {msg.metadata.dst_node_id}"), reply_to=msg)
        start = time.perf_counter()
        try:
            reply = self.client_app(msg, ctx)
        except Exception as err:  # a client crash is a failed reply, as in Flower
            reply = Message(Error(code=500, reason=f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"), reply_to=msg)
        self.client_seconds += time.perf_counter() - start
        return reply

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in self.stamp(messages):
            key = str(next(self._ids))
            self._pending[key] = self._deliver(msg)
            ids.append(key)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._pending.pop(i) for i in message_ids if i in self._pending]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = self.stamp(messages)
        if self.executor is None or not messages or any(m.metadata.message_type != MessageType.TRAIN for m in messages):
            return [self._deliver(m) for m in messages]
        before, start = self.client_seconds, time.perf_counter()
        replies = self.executor.run(messages)
        self.client_seconds = before + time.perf_counter() - start  # the lanes' own sums include their parked time
        return replies
