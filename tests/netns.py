"""Network namespaces as separate hosts for deployment tests.

One namespace holds the SuperLink (``link``); each SuperNode gets its own namespace joined
to it by a veth pair: 10.200.<i+1>.1 on the SuperLink side, 10.200.<i+1>.2 on the node
side. Addresses exist only inside these namespaces (nothing is routed to or from the host),
veth ends are created directly inside them, and deleting the namespaces removes it all.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid


def ip(*args: str) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"fedapp-probe-{uuid.uuid4().hex[:6]}"
    try:
        ip("netns", "add", name)
    except (OSError, FileNotFoundError) as err:
        return f"cannot create a network namespace: {err}"
    ip("netns", "del", name)
    return None


class Netns:
    def __init__(self, num_nodes: int):
        tag = uuid.uuid4().hex[:6]
        self.num_nodes = num_nodes
        self.link = f"fedapp-{tag}-link"
        self.nodes = [f"fedapp-{tag}-n{i}" for i in range(num_nodes)]

    def node(self, i: int) -> str:
        return self.nodes[i]

    def link_address(self, i: int) -> str:
        return f"10.200.{i + 1}.1"

    def node_address(self, i: int) -> str:
        return f"10.200.{i + 1}.2"

    def link_dev(self, i: int) -> str:
        return f"vl{i}"

    def create(self) -> Netns:
        made: list[str] = []
        try:
            for ns in [self.link, *self.nodes]:
                ip("netns", "add", ns)
                made.append(ns)
                ip("-n", ns, "link", "set", "lo", "up")
            for i, ns in enumerate(self.nodes):
                ip("-n", self.link, "link", "add", self.link_dev(i), "type", "veth", "peer", "name", "vn", "netns", ns)
                ip("-n", self.link, "addr", "add", f"{self.link_address(i)}/24", "dev", self.link_dev(i))
                ip("-n", ns, "addr", "add", f"{self.node_address(i)}/24", "dev", "vn")
                ip("-n", self.link, "link", "set", self.link_dev(i), "up")
                ip("-n", ns, "link", "set", "vn", "up")
        except BaseException:
            for ns in made:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            raise
        return self

    def cut(self, i: int) -> None:
        """Pull node i's cable: its veth end on the SuperLink side goes down."""
        ip("-n", self.link, "link", "set", self.link_dev(i), "down")

    def restore(self, i: int) -> None:
        ip("-n", self.link, "link", "set", self.link_dev(i), "up")

    def received(self, i: int) -> int:
        """Bytes the SuperLink side of node i's link has received from the node."""
        info = json.loads(ip("-j", "-s", "-n", self.link, "link", "show", "dev", self.link_dev(i)))[0]
        return int(info["stats64"]["rx"]["bytes"])

    def delete(self) -> None:
        for ns in [*self.nodes, self.link]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
