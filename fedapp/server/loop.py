"""The server's entry, shared by the ServerApp (`flwr run`) and the in-process engine: take the
run folder, prepare the run, then play its rounds (fedapp.server.session), recording a failure
in the folder. Our own loop rather than ``Strategy.start`` because runs may end early (FedSPU
early stopping), every round must be written out, and a restarted SuperLink resumes from the
last finished round."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.serverapp import Grid

from fedapp.core.config import ConfigError
from fedapp.server import rundir
from fedapp.server.progress import RoundReporter
from fedapp.server.run_log import RunLog
from fedapp.server.session import claim, prepare


def serve(
    grid: Grid, raw_config: Mapping[str, Any], base: Path | None = None, provenance: dict[str, Any] | None = None,
    discovery_timeout: float | None = None, report: RoundReporter | None = None,
) -> Path:  # fmt: skip
    """Run a whole federation on ``grid`` (or, with ``resume=true``, the rest of it); returns the run folder.

    ``base`` is the folder a relative (or default) run-dir resolves against; ``discovery_timeout``
    overrides the run-config's ``discovery-timeout``; ``report`` sees each round's metrics row
    (default: one log line per round). Nothing in the run
    folder changes until the config is valid, the folder may be used (fedapp.server.rundir), its lock
    is held and discovery found every partition; a failure after the lock is recorded in the
    folder's failure.json (what `fedapp sim` reports)."""
    run_log = RunLog()  # held until the run starts, then <run-dir>/run.log
    try:
        taken = claim(raw_config, base)
        started = False
        try:
            session = prepare(grid, taken, discovery_timeout, report)
            started = True
            session.open(run_log, provenance)
            session.run()
        except BaseException as err:
            rundir.record_failure(taken.run_dir, one_line(err), "rounds" if started else "start")
            if started:
                run_log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR run failed: {one_line(err)} (failure.json)")
            raise
        finally:
            taken.lock.release(remove_if_empty=not started)
        return taken.run_dir
    finally:
        run_log.close()


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if isinstance(err, ConfigError) and text else f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")
