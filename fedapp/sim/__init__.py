"""`fedapp run`: the in-process federation (run_local.py); `fedapp sim`: `flwr run` with in-process
checks, on this checkout's own Flower home and ports."""
