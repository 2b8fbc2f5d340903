"""The data query, sent once right after discovery: each placed node answers with the digest of
its data as loaded (fedapp.client.data_query), kept in the roster's facts for the provenance.

An answer is checked like a discovery answer (fedapp.server.roster.facts_of); a digest that is not
64 hex characters, a node that does not answer or that could not load its data is recorded as
``data-sha256 = null`` with the reason logged: the record says "unknown", never a wrong value.
"""

from __future__ import annotations

import logging
import re

from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from fedapp.server.roster import Roster, facts_of

log = logging.getLogger("flwr")
DIGEST = re.compile(r"[0-9a-f]{64}")


def ask_data(roster: Roster, timeout: float) -> None:
    """Ask every placed node for its data digest; ``roster.info[pid]["data-sha256"]`` holds the answer or None."""
    by_node = {node: pid for pid, node in roster.nodes.items()}
    asked = ConfigRecord({"ask": "data", "num-clients": roster.num_clients})
    ttl = max(1.0, timeout)
    msgs = [Message(RecordDict({"config": asked}), dst_node_id=n, message_type=MessageType.QUERY, ttl=ttl) for n in sorted(by_node)]
    for placed in by_node.values():
        roster.info[placed]["data-sha256"] = None
    for reply in roster.grid.send_and_receive(msgs, timeout=ttl):
        node = reply.metadata.src_node_id
        if node not in by_node:
            continue
        pid = by_node[node]
        if reply.has_error():
            log.warning("node %d did not report its data digest: %s", node, reply.error.reason)
            continue
        try:
            _, facts = facts_of(reply)
        except Exception as err:  # an unusable answer leaves the digest unknown, nothing else
            log.warning("node %d: data digest answer unusable (%s)", node, err)
            continue
        digest = facts.get("data-sha256")
        if isinstance(digest, str) and DIGEST.fullmatch(digest):
            roster.info[pid]["data-sha256"] = digest
        else:
            log.warning("node %d did not report its data digest: %s", node, facts.get("data-error", f"got {digest!r:.80}"))
