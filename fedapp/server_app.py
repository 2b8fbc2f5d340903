"""The ServerApp: read the run-config, run the federation, write results (fedapp.server.loop). Flower
loads it through the top-level server_app.py."""

import logging

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedapp.server.loop import one_line, serve
from fedapp.server.rundir import checkout_base

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    run = grid.run
    for key in ("client-batch", "engine-workers"):
        if str(context.run_config.get(key, "1")) != "1":
            logging.getLogger("flwr").warning("fedapp: run-config key '%s' is for the in-process engine (fedapp run); ignored here", key)
    facts = {"engine": "flwr run", "flwr-run-id": run.run_id, "fab-hash": run.fab_hash, "run-config-overrides": dict(run.override_config)}
    try:
        serve(grid, context.run_config, base=checkout_base(), provenance=facts)
    except Exception as err:
        logging.getLogger("flwr").error("fedapp: error: %s", one_line(err))  # the line `fedapp sim` reports
        raise
