"""ServerApp: read the run-config, run the federation, write results (fedapp.server)."""

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedapp.server import serve

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    serve(grid, context.run_config)
