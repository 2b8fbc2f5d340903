"""The simulated-run tests wait for the run's own end, not `flwr run`'s exit code: a run whose
ServerApp failed before writing config.json is named by the status the SuperLink recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedapp.server import rundir
from tests.flwr_harness import assert_completed, flwr_run, run_status

pytestmark = pytest.mark.flwr


def test_a_run_that_failed_at_discovery_exits_0_and_is_named_by_its_status(tmp_path: Path) -> None:
    """discovery-timeout 0.5 s: the ServerApp gives up before any node answered (as the default
    120 s did under heavy load), so the folder holds failure.json and no config.json."""
    run_dir = tmp_path / "r"
    run = {"num-clients": 2, "partition": "0,1,2,3,4|5,6,7,8,9", "num-server-rounds": 1, "discovery-timeout": 0.5, "run-dir": str(run_dir)}
    proc = flwr_run(tmp_path, run, num_supernodes=2)
    assert proc.returncode == 0  # Flower's: the stream ended because the run finished, however
    assert sorted(p.name for p in run_dir.iterdir()) == [rundir.FAILURE]
    status, details = run_status(proc)
    reason = json.loads((run_dir / rundir.FAILURE).read_text())["reason"]
    assert status == "finished:failed" and "after 0s (discovery-timeout)" in reason and reason in details
    with pytest.raises(AssertionError, match=r"run finished:failed: Simulation failed with exception: run-config key 'num-clients'"):
        assert_completed(proc, run_dir)
