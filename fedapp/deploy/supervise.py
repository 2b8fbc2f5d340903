"""Keep Flower's processes running: restart them a few seconds after one exits.

A SuperNode exits instead of retrying when the SuperLink refuses to activate it, which is
what happens after a crash or power loss: its previous session counts as online until its
heartbeat lapses (about 60 s). A supervisor (this loop, systemd ``Restart=always`` or
compose ``restart:``) brings it back once the SuperLink accepts it again. Processes that
only work together (the SuperLink and its proxy) are one group: when one exits, the others
are stopped and the group restarts as a whole. A helper that the group outlives (the SuperLink's
SuperExec, which launches each ServerApp and exits on the first error the SuperLink answers, e.g.
"database is locked" under load) is respawned alone, without touching the rest, in either mode.
SIGTERM/SIGINT stop the children and the loop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

RESPAWN_DELAY = 2.0


def _name(child: subprocess.Popen[bytes]) -> str:
    return os.path.basename(str(child.args[0]))  # type: ignore[index]


def _first_exit(
    children: list[subprocess.Popen[bytes]], helpers: list[subprocess.Popen[bytes]], delay: float, stopping: Callable[[], bool]
) -> tuple[int, str]:
    """Wait for a group member to exit; meanwhile respawn each helper ``delay`` s after it exits
    (not once the supervisor is stopping)."""
    due: dict[int, float] = {}
    while True:
        for child in children:
            rc = child.poll()
            if rc is not None:
                return rc, _name(child)
        for i, helper in enumerate(helpers):
            rc = helper.poll()
            if rc is not None and i not in due:
                print(f"fedapp deploy: {_name(helper)} exited with {rc}; starting it again in {delay:g}s", file=sys.stderr, flush=True)
                due[i] = time.monotonic() + delay
            elif i in due and time.monotonic() >= due[i] and not stopping():
                helpers[i] = subprocess.Popen(helper.args)
                del due[i]
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


def supervise_group(
    argvs: list[list[str]], restart_delay: float, respawn: list[list[str]] | None = None, respawn_delay: float = RESPAWN_DELAY
) -> int:
    """Run every command of ``argvs`` together until one exits; return its exit code, or with
    ``restart_delay`` >= 0 stop the rest and start them all again after that many seconds.
    Each command of ``respawn`` runs beside the group and is started again ``respawn_delay`` s
    after it exits, alone."""
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
        helpers = [subprocess.Popen(argv) for argv in respawn or []]
        children.extend(helpers)  # signals reach them too
        rc, name = _first_exit(children[: len(argvs)], helpers, respawn_delay, lambda: stopping)
        children[len(argvs) :] = helpers  # the respawned ones
        _stop(children)
        if stopping or restart_delay < 0:
            return rc
        print(f"fedapp deploy: {name} exited with {rc}; restarting in {restart_delay:g}s", file=sys.stderr, flush=True)
        deadline = time.monotonic() + restart_delay
        while time.monotonic() < deadline and not stopping:
            time.sleep(0.2)
        if stopping:
            return rc
