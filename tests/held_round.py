"""Run an in-process federation on engine workers where one round-ROUND train message announces
itself and waits, so that a test can end Ray (the whole cluster, or one node) under it.

    python -m tests.held_round '<run-config overrides as JSON>' ROUND MARKER [NODE_IP]

The real ClientApp handles every message. Held is partition 0's message, or with NODE_IP each one
trained on the Ray node at that address (the test kills the node while the first waits): it writes
its partition id to the file MARKER, then waits (at most WAIT seconds) before training.
With ``ray-address`` empty the run starts its own local Ray as children of this process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import ray
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

import fedapp.client_app
from fedapp.client.handlers import handle_train
from fedapp.sim.run_local import run_local
from tests.client_apps import app_with_train

WAIT = 60.0


def waiting_app(rnd: int, marker: str, node_ip: str = "") -> ClientApp:
    def _train(msg: Message, context: Context) -> Message:
        pid = context.node_config["partition-id"]
        here = ray.util.get_node_ip_address() == node_ip if node_ip else pid == 0
        if here and msg.content["config"]["server-round"] == rnd:  # type: ignore[index]
            Path(marker + ".part").write_text(str(pid))
            os.replace(marker + ".part", marker)  # whole when the test sees it
            time.sleep(WAIT)
        return handle_train(msg, context)

    return app_with_train(_train)


def main() -> None:
    overrides, rnd, marker = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    node_ip = sys.argv[4] if len(sys.argv) > 4 else ""
    fedapp.client_app.app = waiting_app(rnd, marker, node_ip)  # run_local imports it at call time; the workers get it pickled
    run_local(overrides)


if __name__ == "__main__":
    main()
