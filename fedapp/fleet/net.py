"""The fleet's network: one namespace for the SuperLink side (``<prefix>link``) and one per
node (``<prefix>n<i>``), joined by a veth pair per node (``vl<i>`` on the link side,
``vn`` on the node side; 10.201.<i+1>.1 and .2, which exist only inside these namespaces).
Each end's egress goes through a tc HTB class at the node's rate: the link side shapes the
downlink, the node side the uplink. The HTB class byte counters are what the fleet records
per round. Deleting the namespaces removes the veths and qdiscs with them."""

from __future__ import annotations

import re
import subprocess

from fedapp.fleet import FleetError

UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_RATE = re.compile(r"\brate (\d+(?:\.\d+)?)([KMG]?bit)\b.*?\bceil (\d+(?:\.\d+)?)([KMG]?bit)\b")
_SENT = re.compile(r"\bSent (\d+) bytes (\d+) pkt")


def run(*argv: str) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise FleetError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def link_address(i: int) -> str:
    return f"10.201.{i + 1}.1"


def node_address(i: int) -> str:
    return f"10.201.{i + 1}.2"


def link_dev(i: int) -> str:
    return f"vl{i}"


NODE_DEV = "vn"


def shape(ns: str, dev: str, mbit: float) -> None:
    """Egress of ``dev`` in ``ns`` limited to ``mbit`` (rate = ceil: no borrowing)."""
    kbit = max(1, round(mbit * 1000))
    run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
    rate = f"{kbit}kbit"
    run("tc", "-n", ns, "class", "replace", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate)


def htb_class(ns: str, dev: str) -> dict[str, int]:
    """The kernel's view of class 1:10 on ``dev``: rate and ceil in bit/s, bytes and packets sent."""
    text = run("tc", "-n", ns, "-s", "class", "show", "dev", dev, "classid", "1:10")
    rate, sent = _RATE.search(text), _SENT.search(text)
    if rate is None or sent is None:
        raise FleetError(f"no HTB class 1:10 on {dev} in {ns}: {text.strip()!r}")
    return {
        "rate_bps": round(float(rate[1]) * UNITS[rate[2].lower()]), "ceil_bps": round(float(rate[3]) * UNITS[rate[4].lower()]),
        "bytes": int(sent[1]), "packets": int(sent[2]),
    }  # fmt: skip


def create(link_ns: str, node_ns: list[str], rates: list[tuple[float, float]]) -> None:
    """Namespaces, veths, addresses and HTB on both ends; ``rates[i]`` = (uplink, downlink) Mbit/s.
    The caller deletes the namespaces (``delete``) whatever happens here."""
    for ns in [link_ns, *node_ns]:
        run("ip", "netns", "add", ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
    for i, (ns, (up, down)) in enumerate(zip(node_ns, rates, strict=True)):
        run("ip", "-n", link_ns, "link", "add", link_dev(i), "type", "veth", "peer", "name", NODE_DEV, "netns", ns)
        run("ip", "-n", link_ns, "addr", "add", f"{link_address(i)}/24", "dev", link_dev(i))
        run("ip", "-n", ns, "addr", "add", f"{node_address(i)}/24", "dev", NODE_DEV)
        run("ip", "-n", link_ns, "link", "set", link_dev(i), "up")
        run("ip", "-n", ns, "link", "set", NODE_DEV, "up")
        shape(link_ns, link_dev(i), down)
        shape(ns, NODE_DEV, up)


def namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def pids_in(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30).stdout
    return [int(p) for p in out.split()]


def delete(ns: str) -> None:
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
