"""Installed versions of the packages a run's numbers depend on, as the server records them
(config.json ``provenance``) and as each node reports them at discovery (fedapp.client.node_query).

Read from the installed distributions' metadata, so asking imports neither torch nor numpy: a
node answers discovery as fast as before. A node whose torch or fedapp differs from the server's
is named in the run's first metrics row (``node_versions_differ``): its numbers need not match.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any

PACKAGES = ("fedapp", "flwr", "flwr-datasets", "torch", "torchvision", "numpy")
NODE_PACKAGES = ("fedapp", "flwr", "torch", "torchvision", "numpy")  # what a node reports of itself
MUST_MATCH = ("torch", "fedapp")  # a node differing from the server in these is named in the first row
FACT_PREFIX = "version-"  # a node's discovery answer: ``version-torch = "2.13.0"``


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def version_facts() -> dict[str, str]:
    """A node's versions as discovery facts (a package not installed is left out)."""
    return {FACT_PREFIX + k: v for k, v in package_versions(NODE_PACKAGES).items() if v is not None}


def node_versions(facts: Mapping[str, Any]) -> dict[str, str]:
    """The versions a node's discovery facts state (none from a node older than this report)."""
    return {k[len(FACT_PREFIX) :]: str(v) for k, v in facts.items() if k.startswith(FACT_PREFIX)}


def mismatches(server: Mapping[str, str | None], nodes: Mapping[int, Mapping[str, Any]], ids: Mapping[int, int]) -> list[str]:
    """One line per node whose torch or fedapp differs from ``server``'s (``nodes``: partition id ->
    discovery facts; ``ids``: partition id -> node id); a node that states no version is not judged."""
    out = []
    for pid in sorted(nodes):
        own = node_versions(nodes[pid])
        differ = [f"{p} {own[p]} (server {server.get(p)})" for p in MUST_MATCH if p in own and own[p] != server.get(p)]
        if differ:
            out.append(f"partition {pid} (node {ids.get(pid, '?')}): " + ", ".join(differ))
    return out
