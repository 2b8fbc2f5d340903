"""Paper anchor (slow): FedAvg on Synthetic-32K, N = 2, spatially separated split,
plain SGD lr 0.001, batch 32, 1 local epoch, server-lr 1 reaches 99% within 200 rounds
(FedPeWS paper, Table 2: 148 ± 3.8). Run with: scripts/test.sh -m slow -k anchor"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedapp.core.config import load_toml_config
from fedapp.sim.run_local import run_local

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_fedavg_synthetic32k_reaches_99_percent_within_200_rounds(tmp_path: Path, seed: int) -> None:
    cfg = load_toml_config(ROOT / "configs" / "synthetic32k-n2-fedavg.toml")
    run = run_local({**cfg, "seed": seed, "run-dir": str(tmp_path / "run")})
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    reached = next((r["round"] for r in rows if r["accuracy"] >= 0.99), None)
    assert reached is not None and reached <= 200, [r["accuracy"] for r in rows[-5:]]
