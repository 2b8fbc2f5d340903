"""Are two same-seed runs on the GPU the same, with and without run-config ``deterministic``?

Each case runs twice in-process (``fedapp.engine``) on ``--device`` with the same seed, once with
``deterministic = false`` (the default: cuDNN benchmarks its convolutions) and once with ``true``,
and prints whether the two runs' final models are bit-identical and their largest gap. Cases: the
FedAvg digits MLP, FedBN's digits CNN with BatchNorm (convolutions), and the CNN with
``client-batch = 4`` (the batched engine's vmapped grouped convolutions). On a CPU every pair is
identical either way (tests/test_deterministic.py); the GPU is where the key matters.

    python bench/gpu_determinism.py --device cuda [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedapp.core.config import load_toml_config  # noqa: E402
from fedapp.sim.run_local import run_local  # noqa: E402

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "fedavg mlp": ("fedavg-digits-n2", {}),
    "fedbn cnn-bn": ("fedbn-digits-cnn-bn", {}),
    "fedavg cnn-bn, client-batch 4": ("fedbn-digits-cnn-bn", {"method": "fedavg", "client-batch": "4"}),
}


def model_of(run_dir: Path) -> dict[str, np.ndarray]:
    with np.load(run_dir / "model.npz") as m:
        return {k: m[k] for k in m.files}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"{'case':<32}{'deterministic':>14}{'identical':>11}{'largest gap':>13}")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, (config, over) in CASES.items():
            for det in (False, True):
                cfg = {**load_toml_config(ROOT / "configs" / f"{config}.toml"), **over}
                cfg.update({"num-server-rounds": args.rounds, "device": args.device, "deterministic": det, "energy-meter": "none"})
                a, b = (model_of(run_local({**cfg, "run-dir": f"{tmp}/{name}-{det}-{i}".replace(" ", "_")})) for i in (0, 1))
                gap = max(float(np.abs(a[k].astype(np.float64) - b[k]).max(initial=0.0)) for k in a)
                same = all(np.array_equal(a[k], b[k]) for k in a)
                failed += det and not same
                print(f"{name:<32}{det!s:>14}{same!s:>11}{gap:>13.3g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
