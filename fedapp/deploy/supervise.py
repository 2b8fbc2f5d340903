"""Keep a Flower process running: restart it a few seconds after it exits.

A SuperNode exits instead of retrying when the SuperLink refuses to activate it, which is
what happens after a crash or power loss: its previous session counts as online until its
heartbeat lapses (about 60 s). A supervisor (this loop, systemd ``Restart=always`` or
compose ``restart:``) brings it back once the SuperLink accepts it again. SIGTERM/SIGINT
stop the child and the loop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType


def supervise(argv: list[str], restart_delay: float) -> int:
    """Run ``argv``; with ``restart_delay`` >= 0 restart it that many seconds after each exit."""
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        child = subprocess.Popen(argv)
        rc = child.wait()
        if stopping or restart_delay < 0:
            return rc
        print(f"fedapp deploy: {os.path.basename(argv[0])} exited with {rc}; restarting in {restart_delay:g}s", file=sys.stderr, flush=True)
        deadline = time.monotonic() + restart_delay
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.2)
        if stopping:
            return rc
