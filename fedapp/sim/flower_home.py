"""Each checkout's own Flower environment for `flwr run` simulations.

`flwr run` sends a run to whatever managed local SuperLink holds its port (39091 unless
``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT`` says otherwise), whatever ``FLWR_HOME`` says. In Flower
1.41 that SuperLink listens on exactly two ports: its HTTP API (``--port``: the Runtime and
Fleet APIs the ServerApp and simulation talk to, and the CLI's health probe) and the Control
API (``--control-api-address``). Both, and ``FLWR_HOME``, are derived here from the checkout's
real path, so two checkouts (or two users) on one machine never share a SuperLink.
``FEDAPP_CHECKOUT`` tells the ServerApp which checkout its SuperLink serves (relative run-dirs
land there). ``scripts/flwr-env.sh`` computes the same values in bash.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

from fedapp.server.rundir import CHECKOUT_ENV

PORT_BASE = 20000  # below Linux's ephemeral range (32768+): a client socket never holds them by chance
PORT_PAIRS = 6000  # HTTP API on PORT_BASE + 2k, Control API on PORT_BASE + 2k + 1


def ports(root: Path) -> tuple[int, int]:
    """(HTTP API port, Control API port) of ``root``'s managed local SuperLink."""
    digest = hashlib.sha256(str(Path(os.path.realpath(root))).encode()).hexdigest()
    http = PORT_BASE + 2 * (int(digest[:8], 16) % PORT_PAIRS)
    return http, http + 1


def checkout_env(root: Path) -> dict[str, str]:
    """The variables scripts/flwr-env.sh exports for the checkout at ``root``."""
    real = Path(os.path.realpath(root))
    http, control = ports(real)
    return {
        CHECKOUT_ENV: str(real),
        "FLWR_HOME": str(real / "runs" / ".flwr"),
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http),
        "FLWR_LOCAL_CONTROL_API_PORT": str(control),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",  # else the SuperLink re-installs deps per run
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "RAY_DISABLE_USAGE_STATS": "1",
        # Flower's simulation calls ray.init() without an address, which joins the cluster named in
        # /tmp/ray/ray_current_cluster: a `ray start` left on the machine (even unreachable) hangs it
        "RAY_ADDRESS": os.environ.get("RAY_ADDRESS", "local"),
    }


def superlink_pids(flwr_home: Path | str, port: int | None = None) -> list[int]:
    """Managed local SuperLinks started with ``flwr_home`` (its log file path is on their command
    line), and if given, listening on ``port``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "flower-superlink" in cmd and f"{flwr_home}/" in cmd and (port is None or f" --port {port} " in f"{cmd} "):
            found.append(int(proc.name))
    return found


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def port_owner_problem(env: dict[str, str]) -> str | None:
    """Why the checkout's SuperLink port cannot be used (held by something else), or None."""
    port = int(env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"])
    if not port_in_use(port) or superlink_pids(env["FLWR_HOME"], port):
        return None
    return f"port {port}, which this checkout's local SuperLink takes (derived from its path), is held by another program; stop that"
