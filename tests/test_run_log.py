"""run.log: a run folder keeps what the run logged (the checks' warnings from before the run
started, each round's line, Python warnings raised while it ran), without colour codes; a
resumed run appends; a piped `fedapp run` prints Flower's log without colour codes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fedapp.cli import main as fedapp_main
from fedapp.server.run_log import FILE, RunLog, plain
from fedapp.sim.run_local import run_local
from tests.flwr_harness import ROOT

BASE = {"dataset": "digits", "num-clients": 2, "partition": "iid", "lr": 0.2, "local-steps": 2, "num-server-rounds": 2}
UNUSED = "run-config key 'proximal-mu' = 0.5 is not used by method 'fedavg'"


def overrides(values: dict[str, object]) -> list[str]:
    return [f"{k}={json.dumps(v)}" for k, v in values.items()]


def test_run_log_holds_the_warnings_and_each_rounds_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.common.logger import console_handler

    monkeypatch.setattr("fedapp.server.progress.interactive", lambda: False)  # as in a pipe
    run_dir = tmp_path / "run"
    try:
        assert fedapp_main(["run", *overrides({**BASE, "proximal-mu": 0.5, "run-dir": str(run_dir)})]) == 0
        record = logging.LogRecord("flwr", logging.WARNING, __file__, 1, "x", None, None)
        assert "\x1b" not in console_handler.format(record)  # Flower's console, piped: no colour codes
    finally:
        console_handler.colored = True
    text = (run_dir / FILE).read_text()
    lines = text.splitlines()
    assert "\x1b" not in text
    assert any(" WARNING " in line and UNUSED in line for line in lines)  # logged before the folder was usable
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        line = f"round {row['round']}/2: accuracy {row['accuracy']:.4f} loss {row['loss']:.4f}"
        assert sum(line in x for x in lines) == 1
    resumed = run_local({**BASE, "proximal-mu": 0.5, "num-server-rounds": 3, "resume": True, "run-dir": str(run_dir)})
    after = (resumed / FILE).read_text()
    assert after.startswith(text) and "round 3/3: accuracy" in after.removeprefix(text)  # appended, not replaced


def test_python_warnings_are_copied_and_colours_dropped(tmp_path: Path) -> None:
    run_log = RunLog()
    try:
        logging.getLogger("flwr").warning("\x1b[33mheld\x1b[0m until open")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("shown as before", UserWarning, stacklevel=1)
        path = run_log.open(tmp_path)
        logging.getLogger("flwr").info("after open")
    finally:
        run_log.close()
    logging.getLogger("flwr").info("after close")
    lines = path.read_text().splitlines()
    assert [line.split(" ", 2)[2] for line in lines][:1] == ["WARNING held until open"]
    assert "WARNING UserWarning: shown as before (" in lines[1] and lines[2].endswith("INFO after open") and len(lines) == 3
    assert plain("\x1b[32mINFO \x1b[0m:  x") == "INFO :  x"


@pytest.mark.slow
def test_piped_fedapp_run_prints_no_colour_codes(tmp_path: Path) -> None:
    """End to end through a real pipe (a fresh process: Flower's console handler as it starts)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "fedapp", "run", *overrides({**BASE, "run-dir": str(tmp_path / "run")})],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=True,
    )  # fmt: skip
    logged = out.stdout + out.stderr
    assert "round 2/2: accuracy" in logged and "INFO" in logged
    assert "\x1b" not in logged
