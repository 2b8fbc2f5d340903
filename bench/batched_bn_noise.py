"""Is a client-batch gap on the BatchNorm CNN the kernel's, or a ReLU near-tie any run can hit?

Per case, three in-process runs of 2 rounds on digits: ``client-batch`` 1 at ``num-threads`` 1,
the same at ``num-threads`` 2 (one client's conv weight gradients then differ in the last bits),
and ``client-batch`` 8 at 1. Prints the max abs difference of the final models pairwise. Where
``client-batch`` 8 parts from both one-at-a-time runs and they agree, the kernel is the odd one;
where the two one-at-a-time runs part as much, the gap is seed noise (docs/batched.md).
Usage: python bench/batched_bn_noise.py [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedapp.sim.run_local import run_local  # noqa: E402

BASE = {"dataset": "digits", "num-server-rounds": 2, "lr": 0.1, "energy-meter": "none", "device": "cpu", "batch-fallback": "error"}
BN = {"model": "cnn-bn", "partition": "iid", "num-clients": 4}
CASES: dict[str, dict[str, Any]] = {
    "fedbn seed 0": {"method": "fedbn", **BN},
    "fedbn seed 1": {"method": "fedbn", **BN, "seed": 1},
    "fedbn seed 2": {"method": "fedbn", **BN, "seed": 2},
    "fedbn local-steps 3 (the test's case)": {"method": "fedbn", **BN, "local-steps": 3},
    "fedavg": {"method": "fedavg", **BN},
    "fedavg local-test-fraction 0.25": {"method": "fedavg", **BN, "local-test-fraction": 0.25},
}


def final_model(over: dict[str, Any], client_batch: int, threads: int, out: Path) -> dict[str, np.ndarray]:
    run_dir = out / f"cb{client_batch}-t{threads}"
    run_local({**BASE, **over, "client-batch": client_batch, "num-threads": threads, "run-dir": str(run_dir)})
    with np.load(run_dir / "model.npz") as z:
        return {k: z[k].astype(np.float64) for k in z.files}


def gap(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    logging.disable(logging.INFO)
    print(f"{'case':40s} {'cb8 vs cb1':>11s} {'cb1 t2 vs t1':>13s} {'cb8 vs cb1 t2':>14s}")
    for name, over in CASES.items():
        if args.only not in name:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            one, two, many = (final_model(over, cb, t, Path(tmp)) for cb, t in ((1, 1), (1, 2), (8, 1)))
        print(f"{name:40s} {gap(one, many):11.2e} {gap(one, two):13.2e} {gap(two, many):14.2e}", flush=True)


if __name__ == "__main__":
    main()
