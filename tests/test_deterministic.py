"""run-config `deterministic`: GPU reproducibility switches set in every process that trains or
evaluates, recorded in the run folder, and CPU results unchanged by it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from fedapp.core.runtime import CUBLAS_WORKSPACE, configure_determinism
from fedapp.sim.run_local import run_local
from tests.run_rows import WIRE, outcome_rows

RUN = {"dataset": "digits", "num-clients": 3, "partition": "iid", "num-server-rounds": 2, "local-steps": 3, "mlp-hidden": "16"}


@pytest.fixture(autouse=True)
def restore_torch_flags() -> Iterator[None]:
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    env = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before[1], before[2]
    if env is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = env


def flags() -> tuple[bool, bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark


def test_a_deterministic_run_sets_the_switches_and_records_the_key(tmp_path: Path) -> None:
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    out = run_local({**RUN, "deterministic": True, "run-dir": str(tmp_path / "det")})
    assert flags() == (True, True, False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
    assert json.loads((out / "config.json").read_text())["deterministic"] is True
    run_local({**RUN, "run-dir": str(tmp_path / "default")})
    assert flags() == (False, False, True)  # the default: cuDNN benchmarks its convolution algorithms


def test_cpu_results_are_the_same_either_way(tmp_path: Path) -> None:
    runs = [run_local({**RUN, "deterministic": d, "run-dir": str(tmp_path / str(d))}) for d in (False, True)]
    assert outcome_rows(runs[0], WIRE) == outcome_rows(runs[1], WIRE)  # wire sizes: the run-dirs differ in length
    with np.load(runs[0] / "model.npz") as a, np.load(runs[1] / "model.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


def test_a_user_set_cublas_workspace_is_kept() -> None:
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    configure_determinism(True)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
