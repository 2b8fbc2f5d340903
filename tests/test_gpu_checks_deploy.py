"""bench/gpu_checks.sh deploy for one round on the CPU: a real SuperLink and four SuperNodes on
loopback, a new process per message (about a minute on 2 cores). Slow-marked to keep the default
suite within its budget: `scripts/test.sh -m slow -k gpu_checks` runs it; the other entries run
in the default suite (tests/test_gpu_checks.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_gpu_checks import gpu_check


@pytest.mark.flwr
@pytest.mark.slow
def test_deploy_runs_a_round_on_a_real_superlink_and_supernodes(tmp_path: Path) -> None:
    out = gpu_check("deploy", str(tmp_path), METER="none", ROUNDS="1", RUNS="fedspu-noes")
    assert re.search(r"^fedspu-noes: 1 rounds; devices .*'cpu", out, re.M), out[-3000:]
    assert re.search(r"round   1: accuracy [\d.]+, [\d.]+ s, GPU nan J, failures 0", out), out[-3000:]
