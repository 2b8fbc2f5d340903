"""Which Flower node serves which partition, kept current while nodes leave and rejoin.

The server cannot read a SuperNode's ``--node-config``, so it asks each node with a
``query`` message (partition-id plus device facts). Node ids are not stable: a SuperNode
restarted without registered keys comes back under a new id, and any node drops out of
``grid.get_node_ids()`` (online nodes only) once its heartbeat lapses. ``discover`` waits
for every partition once; ``refresh`` runs between rounds and costs a query only for ids
it has not seen before.

The federation's size comes from the nodes: each reports ``num-partitions`` (node-config).
With ``num-clients = 0`` the run takes that number; a stated ``num-clients`` that differs
from what a node reports fails discovery at that node's first answer, not at the timeout.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fedapp.client_config_errors import stop_on_config_errors
from fedapp.config import ConfigError

log = logging.getLogger("flwr")


class Roster:
    def __init__(self, grid: Grid, num_clients: int):
        """``num_clients`` 0: as many as the nodes report (known after their first answer)."""
        self.grid, self.num_clients, self.stated = grid, num_clients, num_clients > 0
        self.nodes: dict[int, int] = {}  # partition id -> node id
        self.info: dict[int, dict[str, Any]] = {}  # partition id -> facts the node reported
        self.strangers: set[int] = set()  # answered, but with a partition this run does not use
        self.waiting: dict[int, dict[str, Any]] = {}  # node id -> facts, while the size is not known yet
        self.discovering = False

    def size_from(self, node: int, facts: dict[str, Any]) -> None:
        """Learn or check the federation's size from a node's ``num-partitions``."""
        reported = facts.get("num-partitions")
        if reported is None:
            return
        n = int(reported)  # type: ignore[arg-type]
        if not self.num_clients:
            self.num_clients = n
            log.info("num-clients = %d (num-partitions reported by the nodes)", n)
        elif n != self.num_clients and self.discovering:
            whose = "run-config key 'num-clients' =" if self.stated else "the other nodes report num-partitions ="
            raise ConfigError(
                f"{whose} {self.num_clients}, but node {node} reports num-partitions = {n}: "
                + ("set num-clients to the federation's size, or 0 to take it from the nodes" if self.stated else "the nodes disagree")
                + (f' (in simulation: --federation-config "num-supernodes={self.num_clients}")' if self.stated else "")
            )

    def query(self, ids: list[int], timeout: float) -> None:
        """Ask ``ids`` who they are; a later claim of a partition replaces an earlier one."""
        msgs = [Message(RecordDict(), dst_node_id=i, message_type=MessageType.QUERY, ttl=max(1.0, timeout)) for i in ids]
        for reply in stop_on_config_errors(self.grid.send_and_receive(msgs, timeout=max(1.0, timeout))):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log.warning("node %s did not answer discovery: %s", node, reply.error.reason)
                continue
            facts = dict(reply.content["info"])  # type: ignore[arg-type]
            if "energy-error" in facts:  # the node cannot open the meter the run asked for
                raise ConfigError(f"node {node}: {facts['energy-error']!s}")
            self.size_from(node, facts)
            if not self.num_clients:
                self.waiting[node] = facts
                continue
            self.place(node, facts)
        for node in sorted(self.waiting) if self.num_clients else []:
            self.place(node, self.waiting.pop(node))

    def place(self, node: int, facts: dict[str, Any]) -> None:
        """Record ``node`` as its partition's server (or a stranger, if the partition is not used)."""
        pid = int(facts["partition-id"])  # type: ignore[arg-type]
        if not 0 <= pid < self.num_clients:
            self.strangers.add(node)
            return
        if pid in self.nodes and self.nodes[pid] != node:
            log.warning("partition-id %d now served by node %d (was node %d)", pid, node, self.nodes[pid])
            self.strangers.add(self.nodes[pid])  # never ask the displaced node again
        self.nodes[pid], self.info[pid] = node, facts

    def discover(self, timeout: float) -> None:
        """Wait until every partition 0..num_clients-1 has a node, or fail naming what is missing
        (at once where a node's num-partitions contradicts num-clients)."""
        deadline = time.monotonic() + timeout
        self.discovering = True
        try:
            while True:
                self.refresh(max(1.0, deadline - time.monotonic()))
                wanted = [p for p in range(self.num_clients) if p not in self.nodes]
                if self.num_clients and not wanted:
                    return
                if time.monotonic() > deadline:
                    if not self.num_clients:
                        raise ConfigError(
                            f"run-config key 'num-clients' = 0 takes the size from the nodes' num-partitions, but after "
                            f"{timeout:.0f}s (discovery-timeout) no node reported one ({len(self.waiting)} answered); set num-clients"
                        )
                    raise ConfigError(
                        f"run-config key 'num-clients' = {self.num_clients}, but after {timeout:.0f}s (discovery-timeout) no node holds "
                        f"partition-id(s) {wanted[:10]} ({len(self.nodes)} node(s) found). In simulation pass "
                        f'--federation-config "num-supernodes={self.num_clients}".'
                    )
                time.sleep(0.5)
        finally:
            self.discovering = False

    def refresh(self, timeout: float) -> dict[int, int]:
        """Forget partitions whose node went offline; ask nodes never seen before who they are."""
        online = set(self.grid.get_node_ids())
        for pid, node in sorted(self.nodes.items()):
            if node not in online:
                log.warning("partition-id %d: node %d is offline; not sampled until it rejoins", pid, node)
                del self.nodes[pid]
        unknown = sorted(online - set(self.nodes.values()) - self.strangers - set(self.waiting))
        if unknown:
            before = dict(self.nodes)
            self.query(unknown, timeout)
            for pid in sorted(set(self.nodes) - set(before)):
                log.info("partition-id %d: node %d joined", pid, self.nodes[pid])
        return dict(self.nodes)
