"""A SuperNode's partition binding: the partition the operator registered its key for.

The binding travels in the node's registered *name* (``<label>:partition-<i>``), which only
the Control API sets (`fedapp deploy register I=KEY.pub`, i.e. ``flwr supernode register
--name``) and which the ServerApp reads back for every online node through the Runtime API
(``grid.get_nodes()``). A node cannot change it: its ``--node-config`` says which partition it
*claims*, the registration says which one it may *serve* (fedapp.server.roster checks the two).
"""

from __future__ import annotations

import re

_BOUND = re.compile(r"(?:.*:)?partition-(0|[1-9][0-9]{0,8})")


def binding_name(label: str, partition: int) -> str:
    """The registered name that binds a node to ``partition``."""
    return f"{label}:partition-{partition}"


def bound_partition(name: str | None) -> int | None:
    """The partition a registered name binds its node to, or None (no binding)."""
    found = _BOUND.fullmatch(name or "")
    return int(found.group(1)) if found else None
