"""One cell of each results document, made again from its documented command and compared with
the number the document prints, then `fedapp reproduce` of that run (identical). Slow suite
(`scripts/test.sh -m slow`): each run is the document's full setting.

Documents without a cell here, and why: docs/results-data.md (RSS and seconds of one machine; its
deterministic numbers need a full-size CIFAR-10 written to disk), docs/results-fleet.md (every
cell is a fleet run: root, network namespaces, tests/test_fleet.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fedapp.core.config import load_toml_config
from fedapp.report.compare import report
from fedapp.sim.reproduce import reproduce
from fedapp.sim.run_local import run_local
from tests.flwr_harness import ROOT
from tests.run_rows import outcome_rows

pytestmark = pytest.mark.slow


def doc_has(doc: str, line: str) -> None:
    """The cell's line is in the document as printed (so this test follows the table it checks)."""
    assert line in (ROOT / "docs" / doc).read_text(), f"{doc} no longer prints {line!r}"


def config(stem: str, **overrides: Any) -> dict[str, Any]:
    return {**load_toml_config(ROOT / "configs" / f"{stem}.toml"), **overrides}


def replayed(run: Path) -> None:
    same, lines = reproduce(run, out=run.parent / f"{run.name}-again")
    assert same, "\n".join(lines)


def final(run: Path, key: str = "accuracy") -> float:
    return round(100 * [r for r in outcome_rows(run) if key in r][-1][key], 2)


def report_row(runs: list[Path], out: Path, group: str, **kwargs: Any) -> str:
    md, _ = report(runs, out, **kwargs)
    rows = [line for line in md.splitlines() if line.startswith(f"| {group} |")]
    assert rows, md
    return rows[0]


def test_fedpews_digits_fedavg_seed_0(tmp_path: Path) -> None:
    """docs/results-fedpews.md, Digits (E6), per-seed table: fedavg seed 0, 93.76 % final, 90 % at round 53
    (scripts/fedpews_grid.py --groups digits: configs/fedavg-digits-n2.toml, seed 0, 1 torch thread)."""
    doc_has("results-fedpews.md", "| fedavg | 93.76 (53) | 92.96 (56) | 92.76 (45) | — |")
    run = run_local(config("fedavg-digits-n2", seed=0, **{"num-threads": 1, "run-dir": str(tmp_path / "fedavg-seed0")}))
    rows = outcome_rows(run)
    assert final(run) == 93.76 and next(r["round"] for r in rows if r["accuracy"] >= 0.9) == 53
    replayed(run)


def test_fedselect_digits_local(tmp_path: Path) -> None:
    """docs/results-fedselect.md, main table: local, 3 seeds (scripts/fedselect-digits.sh)."""
    line = "| local | local | 3 | 96.47 ± 1.06 | 96.47 ± 1.06 | × | 0.000 ± 0.000 | 0.000 ± 0.000 |"
    doc_has("results-fedselect.md", line)
    runs = [
        run_local(config("fedselect-digits", method="local", seed=s, **{"data-seed": s, "run-dir": str(tmp_path / f"local-seed{s}")}))
        for s in (0, 1, 2)
    ]
    assert report_row(runs, tmp_path / "report", "local", key="personalized_accuracy", ignore=frozenset({"data-seed"})) == line
    replayed(runs[0])


def test_fedspu_digits_early_stopping_alpha_01(tmp_path: Path) -> None:
    """docs/results-fedspu.md, α = 0.1 table: FedSPU with early stopping, 3 seeds (scripts/fedspu_grid.py)."""
    line = "| a0.1-fedspu-es | fedspu | 3 | 84.80 ± 6.08 | 85.11 ± 6.21 | × | 3.751 ± 0.137 | 3.807 ± 0.137 |"
    doc_has("results-fedspu.md", line)
    extra = {"method": "fedspu", "early-stopping": True, "dirichlet-alpha": 0.1}
    runs = [run_local(config("fedspu-digits", seed=s, **extra, **{"run-dir": str(tmp_path / f"a0.1-fedspu-es-seed{s}")})) for s in range(3)]
    assert report_row(runs, tmp_path / "report", "a0.1-fedspu-es", key="personalized_accuracy") == line
    replayed(runs[0])


@pytest.mark.xfail(
    strict=True,
    reason="measured here and at b9ed31e: best 76.66 % as printed, final 75.86 % where docs/results-fedpart.md prints 76.46 %",
)
def test_fedpart_digits_noise_04_seed_0(tmp_path: Path) -> None:
    """docs/results-fedpart.md, digits CNN σ = 0.4, per seed best / final: FedPart seed 0, 76.66 / 76.46
    (bench/fedpart_digits.sh 0.4: configs/fedpart-digits-cnn.toml seed=0 input-noise=0.4)."""
    doc_has("results-fedpart.md", "- FedPart: 76.66 / 76.46, 76.66 / 76.26, 75.45 / 74.45.")
    run = run_local(config("fedpart-digits-cnn", seed=0, **{"input-noise": 0.4, "run-dir": str(tmp_path / "fedpart-seed0")}))
    best = round(100 * max(r["accuracy"] for r in outcome_rows(run)), 2)
    assert (best, final(run)) == (76.66, 76.46)
    replayed(run)


def test_energy_auto_records_time_only(tmp_path: Path) -> None:
    """docs/results-energy.md §2: the documented 3-round run on a machine without a meter writes rows with
    time keys and no ``*_j`` key (the table's seconds are this machine's and are not compared)."""
    doc_has("results-energy.md", "| round | seconds | train_s (Σ 3 clients) | wait_s (Σ) | client_train_s |")
    run = run_local({"num-server-rounds": 3, "num-clients": 3, "run-dir": str(tmp_path / "energy-auto-demo")})
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert all("train_s" in r and "wait_s" in r and "client_train_s" in r and not any(k.endswith("_j") for k in r) for r in rows)
    replayed(run)
