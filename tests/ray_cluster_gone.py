"""Run an in-process federation on engine workers whose round-ROUND train message to partition 0
announces itself and waits, so that a test can end the whole Ray cluster under it.

    python -m tests.ray_cluster_gone '<run-config overrides as JSON>' ROUND MARKER

The real ClientApp handles every message; partition 0's train message of round ROUND first
creates the file MARKER, then waits (at most WAIT seconds) before training: the test kills every
Ray process the run started (GCS, raylet, workers) meanwhile. ``engine-workers`` must be > 1 and
``ray-address`` empty, so that the run starts its own local Ray as children of this process.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

import fedapp.client_app
from fedapp.client.handlers import handle_train
from fedapp.sim.run_local import run_local
from tests.client_apps import app_with_train

WAIT = 60.0


def waiting_app(rnd: int, marker: str) -> ClientApp:
    def _train(msg: Message, context: Context) -> Message:
        if context.node_config["partition-id"] == 0 and msg.content["config"]["server-round"] == rnd:  # type: ignore[index]
            Path(marker).touch()
            time.sleep(WAIT)
        return handle_train(msg, context)

    return app_with_train(_train)


def main() -> None:
    overrides, rnd, marker = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    fedapp.client_app.app = waiting_app(rnd, marker)  # run_local imports it at call time; the workers get it pickled
    run_local(overrides)


if __name__ == "__main__":
    main()
