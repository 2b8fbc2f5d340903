"""Keep Flower's processes running: restart them a few seconds after one exits.

A SuperNode exits instead of retrying when the SuperLink refuses to activate it, which is
what happens after a crash or power loss: its previous session counts as online until its
heartbeat lapses (about 60 s). A supervisor (this loop, systemd ``Restart=always`` or
compose ``restart:``) brings it back once the SuperLink accepts it again. Processes that
only work together (the SuperLink and its proxy) are one group: when one exits, the others
are stopped and the group restarts as a whole. SIGTERM/SIGINT stop the children and the loop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType


def _first_exit(children: list[subprocess.Popen[bytes]]) -> tuple[int, str]:
    while True:
        for child in children:
            rc = child.poll()
            if rc is not None:
                return rc, os.path.basename(str(child.args[0]))  # type: ignore[index]
        time.sleep(0.2)


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def supervise(argv: list[str], restart_delay: float) -> int:
    """Run ``argv``; with ``restart_delay`` >= 0 restart it that many seconds after each exit."""
    return supervise_group([argv], restart_delay)


def supervise_group(argvs: list[list[str]], restart_delay: float) -> int:
    """Run every command of ``argvs`` together until one exits; return its exit code, or with
    ``restart_delay`` >= 0 stop the rest and start them all again after that many seconds."""
    stopping = False
    children: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        children[:] = []
        for argv in argvs:
            children.append(subprocess.Popen(argv))
        rc, name = _first_exit(children)
        _stop(children)
        if stopping or restart_delay < 0:
            return rc
        print(f"fedapp deploy: {name} exited with {rc}; restarting in {restart_delay:g}s", file=sys.stderr, flush=True)
        deadline = time.monotonic() + restart_delay
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.2)
        if stopping:
            return rc
