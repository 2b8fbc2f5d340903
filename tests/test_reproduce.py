"""`fedapp reproduce RUN_DIR`: a finished run played again from its config.json is "identical"
(rows without timing keys, and model.npz, compared exactly); a tampered model array, a changed
row, a resumed run, a shorter replay, a changed package version or data digest and bad input are
each reported as such."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedapp.cli import main
from fedapp.sim.run_local import run_local

RUN = {"dataset": "digits", "num-clients": 2, "partition": "iid", "lr": 0.2, "local-steps": 1, "num-server-rounds": 2}


def reproduce(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["reproduce", *args])
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_local({**RUN, "run-dir": str(tmp_path_factory.mktemp("rep") / "run")})


def copy_of(run: Path, name: str) -> Path:
    """A copy of the run folder whose path is as long as the original's (so message sizes compare too)."""
    assert len(name) == len(run.name)
    return Path(shutil.copytree(run, run.parent / name, dirs_exist_ok=False))


def test_a_run_played_again_is_identical_in_rows_model_and_provenance(finished: Path) -> None:
    code, out = reproduce(str(finished), "--out", str(finished.parent / "ru1"))
    assert code == 0, out
    assert out.splitlines()[-2:] == ["commit, packages, device and data digests as recorded", "identical"]
    assert "not compared" not in out  # rows with their message sizes, and model.npz
    assert json.loads((finished.parent / "ru1" / "config.json").read_text())["num-server-rounds"] == 2


def test_a_tampered_model_array_and_a_changed_row_are_named(finished: Path) -> None:
    run = copy_of(finished, "ru2")
    with np.load(run / "model.npz") as z:
        arrays = dict(z)
    key = sorted(arrays)[-1]
    arrays[key] = arrays[key].copy()
    arrays[key].flat[0] += 1e-6
    np.savez(run / "model.npz", **arrays)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows[1]["loss"] = 9.0
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out = reproduce(str(run), "--out", str(run.parent / "ru3"))
    assert code == 1, out
    last = out.splitlines()[-1]
    assert last.startswith("differs: round 2: key 'loss' was 9.0, now ") and f"model.npz differs in 1 array(s), first {key!r}" in last


def test_a_changed_package_version_and_data_digest_are_named_as_reasons(finished: Path) -> None:
    run = copy_of(finished, "ru4")
    config = json.loads((run / "config.json").read_text())
    config["provenance"]["packages"]["torch"] = "1.0.0"
    config["provenance"]["nodes"]["1"]["data-sha256"] = "0" * 64
    (run / "config.json").write_text(json.dumps(config))
    code, out = reproduce(str(run), "--out", str(run.parent / "ru5"))
    assert code == 0, out  # the results themselves still agree
    torch = importlib.metadata.version("torch")
    assert f"not as recorded: packages: torch 1.0.0 recorded, {torch} now" in out.splitlines()
    assert "not as recorded: data digest differs for partition(s) 1" in out.splitlines()


def test_a_resumed_run_and_a_shorter_replay(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_local({**RUN, "num-server-rounds": 1, "run-dir": str(run)})
    run_local({**RUN, "run-dir": str(run), "resume": True})
    code, out = reproduce(str(run), "--out", str(tmp_path / "ru1"))
    assert code == 0 and out.splitlines()[-1] == "identical", out
    assert "mb_total, wire_bytes_clients, wire_bytes_down, wire_bytes_up not compared: the run was resumed" in out
    code, out = reproduce(str(run), "--rounds", "1", "--out", str(tmp_path / "ru2"))
    assert code == 0 and out.splitlines()[-1] == "identical", out
    assert "model.npz not compared: 1 of the recorded 2 rounds replayed" in out


@pytest.mark.parametrize("method", ["fedavg-ft", "fedper", "local"])
def test_the_personalised_baselines_no_config_file_runs_are_identical(tmp_path: Path, method: str) -> None:
    """The methods no file in configs/ runs (scripts/config_snapshot.py run --reproduce covers the others)."""
    shard = {"partition": "shard", "classes-per-client": 2, "samples-per-client": 10, "mlp-hidden": "16", "batch-size": 10}
    run = run_local({**RUN, **shard, "method": method, "num-clients": 5, "run-dir": str(tmp_path / "run")})
    code, out = reproduce(str(run), "--out", str(tmp_path / "rux"))
    assert code == 0 and out.splitlines()[-1] == "identical" and "not compared" not in out, out


def test_bad_input_is_one_line_before_any_training(tmp_path: Path, finished: Path) -> None:
    code, out = reproduce(str(tmp_path / "nothing"))
    assert code == 2 and out.strip().splitlines() == [
        f"fedapp: error: fedapp reproduce: {tmp_path / 'nothing'} is not a finished run folder (it needs config.json and metrics.jsonl)"
    ]
    code, out = reproduce(str(finished), "--rounds", "0", "--out", str(tmp_path / "never"))
    assert code == 2 and "--rounds 0 is not allowed" in out and not (tmp_path / "never").exists()
