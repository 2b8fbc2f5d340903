"""Which Flower node serves which partition, kept current while nodes leave and rejoin.

The server cannot read a SuperNode's ``--node-config``, so it asks each node with a
``query`` message (partition-id plus device facts). Node ids are not stable: a SuperNode
restarted without registered keys comes back under a new id, and any node drops out of
``grid.get_node_ids()`` (online nodes only) once its heartbeat lapses. ``discover`` waits
for every partition once; ``refresh`` runs between rounds and costs a query only for ids
it has not seen before.

An answer is checked, not trusted: one that is malformed (no ``info``, a partition-id that
is not a whole number, oversized facts) makes that node a stranger, never a crash. A
partition whose node is online cannot be claimed by another node: the claimant is asked
again at the next refresh and takes over only once the first node has gone offline (a
restarted SuperNode under a new id, whose old id has not lapsed yet, gets its partition
back that way). A node's device or meter error stops the run at discovery (the run asked
for a device or meter the node lacks); mid-run it only keeps that node out.

Partition bindings (fedapp.server.node_binding): once any online node's registered name binds it to
a partition, bindings are in force for the rest of the run. A node then serves only the
partition it was registered for: a claim of another partition, or a node registered without
a binding, is refused and the node kept out, and a node placed before bindings were seen
loses a partition it is not bound to. Without any binding (simulation, nodes registered
without one) partitions go to their first claimant, as above.

Every refused claim and every node kept out is logged with its reason and kept in
``refused`` until the round loop takes it into the round's metrics row (``take_refused``).

The federation's size comes from the nodes: each reports ``num-partitions`` (node-config).
With ``num-clients = 0`` the run takes that number; a stated ``num-clients`` that differs
from what a node reports fails discovery at that node's first answer, not at the timeout.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fedapp.client.config_errors import stop_on_config_errors
from fedapp.core.config import ConfigError
from fedapp.server.node_binding import bound_partition

log = logging.getLogger("flwr")

MAX_FACTS = 32  # entries of a node's answer (it sends about eight)
MAX_FACT_CHARS = 1000  # characters of one fact (a meter description, an error message)


class BadAnswer(ValueError):
    """A node's discovery answer cannot be used."""


def facts_of(reply: Message) -> tuple[int, dict[str, Any]]:
    """The partition id and facts a query answer states, or BadAnswer saying what is wrong."""
    info = reply.content.get("info")
    if not isinstance(info, ConfigRecord):
        raise BadAnswer(f"no 'info' ConfigRecord (got {type(info).__name__})")
    if len(info) > MAX_FACTS:
        raise BadAnswer(f"{len(info)} facts, more than {MAX_FACTS}")
    facts = dict(info)
    for k, v in facts.items():
        if len(k) > MAX_FACT_CHARS or (isinstance(v, (str, bytes, list)) and len(v) > MAX_FACT_CHARS):
            raise BadAnswer(f"fact {k[:40]!r} is longer than {MAX_FACT_CHARS}")
    pid = facts.get("partition-id")
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise BadAnswer(f"partition-id = {pid!r:.40} is not an integer")
    return pid, facts


class Roster:
    def __init__(self, grid: Grid, num_clients: int):
        """``num_clients`` 0: as many as the nodes report (known after their first answer)."""
        self.grid, self.num_clients, self.stated = grid, num_clients, num_clients > 0
        self.nodes: dict[int, int] = {}  # partition id -> node id
        self.info: dict[int, dict[str, Any]] = {}  # partition id -> facts the node reported
        self.strangers: set[int] = set()  # answered, but with a partition this run does not use, or unusably
        # every partition had a node once: from then on a meter error keeps a node out (not the
        # run), and a node's num-partitions is no longer checked against num-clients
        self.discovered = False
        self.waiting: dict[int, dict[str, Any]] = {}  # node id -> facts, while the size is not known yet
        self.bindings: dict[int, int | None] = {}  # node id -> the partition its registration binds it to
        self.bound = False  # some online node carried a binding: from then on every node needs one
        self.refused: list[str] = []  # refusals not yet in a metrics row
        self.kept_out: dict[int, str] = {}  # node id -> why it was last refused (named if discovery fails)

    def refuse(self, node: int, why: str, stranger: bool = True) -> None:
        """Log and keep a refused claim; a stranger is never asked again."""
        log.warning("node %d kept out: %s", node, why)
        self.refused.append(f"node {node}: {why}")
        self.kept_out[node] = why
        if stranger:
            self.strangers.add(node)

    def take_refused(self) -> list[str]:
        """The refusals since the last call, each once (what the round's metrics row reports;
        discovery asks a refused claimant again every half second)."""
        out, self.refused = list(dict.fromkeys(self.refused)), []
        return out

    def size_from(self, node: int, facts: dict[str, Any]) -> None:
        """Learn or check the federation's size from a node's ``num-partitions``."""
        reported = facts.get("num-partitions")
        if isinstance(reported, bool) or not isinstance(reported, int) or reported < 1:
            return  # absent (an older node) or unusable: the size comes from num-clients or other nodes
        n = reported
        if not self.num_clients:
            self.num_clients = n
            log.info("num-clients = %d (num-partitions reported by the nodes)", n)
        elif n != self.num_clients and not self.discovered:
            whose = "run-config key 'num-clients' =" if self.stated else "the other nodes report num-partitions ="
            raise ConfigError(
                f"{whose} {self.num_clients}, but node {node} reports num-partitions = {n}: "
                + ("set num-clients to the federation's size, or 0 to take it from the nodes" if self.stated else "the nodes disagree")
                + (f' (in simulation: --federation-config "num-supernodes={self.num_clients}")' if self.stated else "")
            )

    def query(self, ids: list[int], timeout: float, online: set[int] | None = None) -> None:
        """Ask ``ids`` who they are. A claim of a partition whose node is in ``online`` is refused."""
        msgs = [Message(RecordDict(), dst_node_id=i, message_type=MessageType.QUERY, ttl=max(1.0, timeout)) for i in ids]
        for reply in stop_on_config_errors(self.grid.send_and_receive(msgs, timeout=max(1.0, timeout))):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log.warning("node %s did not answer discovery: %s", node, reply.error.reason)
                continue
            try:
                pid, facts = facts_of(reply)
            except Exception as err:  # one node's unusable answer keeps that node out, nothing else
                self.refuse(node, f"discovery answer unusable ({type(err).__name__}: {err})")
                continue
            if self.bound and self.bindings.get(node) != pid:  # before its size or errors count for anything
                self.refuse(node, self.unbound_claim(node, pid))
                continue
            problem = next((facts[e] for e in ("device-error", "energy-error") if e in facts), None)
            if problem is not None:  # the node lacks the device or meter the run asked for
                if not self.discovered:
                    raise ConfigError(f"node {node}: {problem!s}")
                self.refuse(node, str(problem))
                continue
            self.size_from(node, facts)
            if not self.num_clients:
                self.waiting[node] = facts
                continue
            self.place(node, pid, facts, online)
        for node in sorted(self.waiting) if self.num_clients else []:
            facts = self.waiting.pop(node)
            self.place(node, int(facts["partition-id"]), facts, online)

    def place(self, node: int, pid: int, facts: dict[str, Any], online: set[int] | None) -> None:
        """Record ``node`` as its partition's server; a stranger if the partition is not used or
        (bindings in force) not the one it is bound to; refused while the partition's node is online."""
        if not 0 <= pid < self.num_clients:
            self.refuse(node, f"claims partition-id {pid}, outside this run's 0..{self.num_clients - 1}")
            return
        if self.bound and self.bindings.get(node) != pid:
            self.refuse(node, self.unbound_claim(node, pid))
            return
        held = self.nodes.get(pid)
        if held is not None and held != node:
            if online is None or held in online:
                self.refuse(node, f"claims partition-id {pid}, which online node {held} serves", stranger=False)
                return
            log.warning("partition-id %d now served by node %d (was node %d, offline)", pid, node, held)
        self.nodes[pid], self.info[pid] = node, facts

    def discover(self, timeout: float) -> None:
        """Wait until every partition 0..num_clients-1 has a node, or fail naming what is missing
        (at once where a node's num-partitions contradicts num-clients)."""
        deadline = time.monotonic() + timeout
        while True:
            self.refresh(max(1.0, deadline - time.monotonic()))
            wanted = [p for p in range(self.num_clients) if p not in self.nodes]
            if self.num_clients and not wanted:
                self.discovered = True
                return
            if time.monotonic() > deadline:
                if not self.num_clients:
                    raise ConfigError(
                        f"run-config key 'num-clients' = 0 takes the size from the nodes' num-partitions, but after "
                        f"{timeout:.0f}s (discovery-timeout) no node reported one ({len(self.waiting)} answered); set num-clients"
                    )
                out = "".join(f"; node {n} kept out: {why}" for n, why in sorted(self.kept_out.items())[:10])
                raise ConfigError(
                    f"run-config key 'num-clients' = {self.num_clients}, but after {timeout:.0f}s (discovery-timeout) no node holds "
                    f"partition-id(s) {wanted[:10]} ({len(self.nodes)} node(s) found{out}). In simulation pass "
                    f'--federation-config "num-supernodes={self.num_clients}".'
                )
            time.sleep(0.5)

    def unbound_claim(self, node: int, pid: int) -> str:
        bound = self.bindings.get(node)
        if bound is None:
            return f"claims partition-id {pid}, but its registration binds it to no partition (bindings are in force)"
        return f"claims partition-id {pid}, but it is registered for partition {bound}"

    def read_bindings(self) -> set[int]:
        """The online nodes, with each one's binding noted; the first binding seen puts bindings
        in force, and every partition held by a node not bound to it is taken back."""
        infos = list(self.grid.get_nodes())
        for info in infos:
            self.bindings[info.node_id] = bound_partition(info.name)
        if not self.bound and any(self.bindings[i.node_id] is not None for i in infos):
            self.bound = True
            log.info("partition bindings in force: each node serves only the partition it was registered for")
            for pid, node in sorted(self.nodes.items()):
                if self.bindings.get(node) != pid:
                    del self.nodes[pid]
                    self.refuse(node, self.unbound_claim(node, pid) + "; partition taken back")
        return {i.node_id for i in infos}

    def refresh(self, timeout: float) -> dict[int, int]:
        """Forget partitions whose node went offline; ask nodes never seen before who they are."""
        online = self.read_bindings()
        for pid, node in sorted(self.nodes.items()):
            if node not in online:
                log.warning("partition-id %d: node %d is offline; not sampled until it rejoins", pid, node)
                del self.nodes[pid]
        unknown = sorted(online - set(self.nodes.values()) - self.strangers - set(self.waiting))
        if unknown:
            before = dict(self.nodes)
            self.query(unknown, timeout, online)
            for pid in sorted(set(self.nodes) - set(before)):
                log.info("partition-id %d: node %d joined", pid, self.nodes[pid])
        return dict(self.nodes)
