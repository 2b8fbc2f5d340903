"""Each entry of bench/gpu_checks.sh runs as written, for one short step on the CPU (DEVICE=cpu).

The GPU checks are run by hand on a GPU machine, rarely; this keeps them from rotting between
those runs: a renamed key, a removed import or a changed output line fails here, in CI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def gpu_check(name: str, *args: str, **env: str) -> str:
    full = {**os.environ, "DEVICE": "cpu", "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run(["bash", "bench/gpu_checks.sh", name, *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return out


def test_round_prints_the_engine_to_plain_ratio() -> None:
    out = gpu_check("round", ROUND_ARGS="--clients 2 --samples 64 --models cnn")
    row = re.search(r"^cnn\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert row, out[-2000:]
    plain, r1, r2, ratio2, ratio1 = map(float, row.groups())
    assert plain > 0 and ratio2 == pytest.approx(r2 / plain, rel=0.1) and ratio1 == pytest.approx(r1 / plain, rel=0.1)


def test_batched_prints_both_models_with_a_small_weight_gap() -> None:
    out = gpu_check("batched", BATCHED_ARGS="--clients 2 --samples 64 --repeats 1")
    gaps = re.findall(r"^(cnn 3x32x32|fedpews mlp \S+)\s+.*\s([\d.]+e[-+]\d+)$", out, re.M)
    assert [g[0].split()[0] for g in gaps] == ["cnn", "fedpews"], out[-2000:]
    assert all(float(g[1]) < 1e-4 for g in gaps)


def test_accuracy_runs_every_method_and_passes_against_itself(tmp_path: Path) -> None:
    out = gpu_check("accuracy", str(tmp_path), ACCURACY_ARGS="--rounds 1")
    verdicts = re.findall(r"^(\w+)\s+\w+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+(PASS|FAIL)$", out, re.M)
    assert [v[0] for v in verdicts] == ["fedavg", "fedpews", "fedselect", "fedspu", "fedpart"], out[-2000:]
    assert all(v[1] == "0.0000" and v[2] == "PASS" for v in verdicts)  # the CPU against itself: no gap


def test_determinism_runs_each_case_twice_and_the_cpu_repeats_itself_bit_for_bit() -> None:
    out = gpu_check("determinism", DETERMINISM_ARGS="--rounds 1")
    rows = re.findall(r"^(.+?)\s+(True|False)\s+(True|False)\s+(\S+)$", out, re.M)
    assert len(rows) == 6 and {r[1] for r in rows} == {"True", "False"}, out[-2000:]
    assert all(r[2] == "True" and float(r[3]) == 0 for r in rows)  # on a CPU every pair is identical


def test_all_goes_on_past_a_failing_check_and_names_it() -> None:
    """`all` runs every check even after one fails, then exits non-zero naming the failed ones
    (it used to end each step with `|| true`)."""
    env = {**os.environ, "DEVICE": "no-such-device", "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), "CHECKS": "round batched"}
    done = subprocess.run(["bash", "bench/gpu_checks.sh", "all"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "gpu_checks: failed: round batched" in done.stderr
