"""Which Flower node serves which partition, kept current while nodes leave and rejoin.

The server cannot read a SuperNode's ``--node-config``, so it asks each node with a
``query`` message (partition-id plus device facts). Node ids are not stable: a SuperNode
restarted without registered keys comes back under a new id, and any node drops out of
``grid.get_node_ids()`` (online nodes only) once its heartbeat lapses. ``discover`` waits
for every partition once; ``refresh`` runs between rounds and costs a query only for ids
it has not seen before.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fedapp.config import ConfigError

log = logging.getLogger("flwr")


class Roster:
    def __init__(self, grid: Grid, num_clients: int):
        self.grid, self.num_clients = grid, num_clients
        self.nodes: dict[int, int] = {}  # partition id -> node id
        self.info: dict[int, dict[str, Any]] = {}  # partition id -> facts the node reported
        self.strangers: set[int] = set()  # answered, but with a partition this run does not use

    def query(self, ids: list[int], timeout: float) -> None:
        """Ask ``ids`` who they are; a later claim of a partition replaces an earlier one."""
        msgs = [Message(RecordDict(), dst_node_id=i, message_type=MessageType.QUERY, ttl=max(1.0, timeout)) for i in ids]
        for reply in self.grid.send_and_receive(msgs, timeout=max(1.0, timeout)):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log.warning("node %s did not answer discovery: %s", node, reply.error.reason)
                continue
            facts = dict(reply.content["info"])  # type: ignore[arg-type]
            for err in ("device-error", "energy-error"):  # the node lacks the device or meter the run asked for
                if err in facts:
                    raise ConfigError(f"node {node}: {facts[err]!s}")
            pid = int(facts["partition-id"])  # type: ignore[arg-type]
            if not 0 <= pid < self.num_clients:
                self.strangers.add(node)
                continue
            if pid in self.nodes and self.nodes[pid] != node:
                log.warning("partition-id %d now served by node %d (was node %d)", pid, node, self.nodes[pid])
                self.strangers.add(self.nodes[pid])  # never ask the displaced node again
            self.nodes[pid], self.info[pid] = node, facts

    def discover(self, timeout: float) -> None:
        """Wait until every partition 0..num_clients-1 has a node, or fail naming what is missing."""
        deadline = time.monotonic() + timeout
        while True:
            self.refresh(max(1.0, deadline - time.monotonic()))
            wanted = [p for p in range(self.num_clients) if p not in self.nodes]
            if not wanted:
                return
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"run-config key 'num-clients' = {self.num_clients}, but after {timeout:.0f}s no node holds partition-id(s) "
                    f"{wanted[:10]} ({len(self.nodes)} node(s) found). In simulation pass "
                    f'--federation-config "num-supernodes={self.num_clients}".'
                )
            time.sleep(0.5)

    def refresh(self, timeout: float) -> dict[int, int]:
        """Forget partitions whose node went offline; ask nodes never seen before who they are."""
        online = set(self.grid.get_node_ids())
        for pid, node in sorted(self.nodes.items()):
            if node not in online:
                log.warning("partition-id %d: node %d is offline; not sampled until it rejoins", pid, node)
                del self.nodes[pid]
        unknown = sorted(online - set(self.nodes.values()) - self.strangers)
        if unknown:
            before = dict(self.nodes)
            self.query(unknown, timeout)
            for pid in sorted(set(self.nodes) - set(before)):
                log.info("partition-id %d: node %d joined", pid, self.nodes[pid])
        return dict(self.nodes)
