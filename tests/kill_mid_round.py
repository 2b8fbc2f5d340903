"""Run an in-process federation and kill -9 its process in the middle of a round.

    python -m tests.kill_mid_round '<run-config overrides as JSON>' ROUND NTH

The real ClientApp handles every message; when the NTH train message of round ROUND arrives
the process sends itself SIGKILL, so the clients before it in that round have trained and
saved their state and nothing after it runs: no atexit, no finally, no flush.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from flwr.app import Context, Message, MessageType

import fedapp.client_app
from fedapp.sim.run_local import run_local


def main() -> None:
    overrides, rnd, nth = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    real, seen = fedapp.client_app.app, [0]

    def app(msg: Message, context: Context) -> Message:
        if msg.metadata.message_type == MessageType.TRAIN and msg.metadata.group_id == str(rnd):
            seen[0] += 1
            if seen[0] == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(msg, context)

    fedapp.client_app.app = app  # type: ignore[assignment]  # run_local imports it at call time
    run_local(overrides)


if __name__ == "__main__":
    main()
