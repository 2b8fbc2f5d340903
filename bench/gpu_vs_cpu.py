"""Same seed, same configs, on the GPU and on the CPU: accuracies side by side.

Short digits runs of FedAvg, FedPeWS, FedSelect, FedSPU and FedPart (the shipped configs,
fewer rounds) through the in-process engine, once with ``device = cuda`` and once with
``device = cpu``. Every random draw (shuffling, masks, augmentation) comes from the same
CPU generators on both, so the runs differ only by floating-point rounding on the GPU
(kernel choice, summation order, TF32 convolutions). Expected: final accuracy within
TOLERANCE (absolute) of the CPU run; the script prints PASS/FAIL per method.

    python bench/gpu_vs_cpu.py [--rounds 20] [--out runs/gpu-vs-cpu]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedapp.core.config import load_toml_config  # noqa: E402
from fedapp.sim.run_local import run_local  # noqa: E402

TOLERANCE = 0.02  # absolute accuracy, final round
FEDPART_SHORT = {"warmup-rounds": 2, "rounds-per-layer": 1, "cycles": 1, "full-rounds-between-cycles": 0, "num-server-rounds": 8}
CONFIGS = {
    "fedavg": "fedavg-digits-n2",
    "fedpews": "fedpews-digits-n2",
    "fedselect": "fedselect-digits",
    "fedspu": "fedspu-digits",
    "fedpart": "fedpart-digits-cnn",
}


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", default="runs/gpu-vs-cpu")
    ap.add_argument("--gpu", default="cuda", help="the accelerator's device value (cuda, cuda:N, mps)")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    print(f"{'method':<10}{'metric':<24}{'cpu':>8}{'gpu':>8}{'|diff|':>8}{'max round |diff|':>18}  verdict (tolerance {TOLERANCE})")
    failed = 0
    for method, name in CONFIGS.items():
        cfg = load_toml_config(ROOT / "configs" / f"{name}.toml")
        cfg.update(FEDPART_SHORT if method == "fedpart" else {"num-server-rounds": args.rounds})
        got = {
            dev: rows(run_local({**cfg, "device": dev, "overwrite": True, "run-dir": str(out / f"{method}-{dev.replace(':', '')}")}))
            for dev in ("cpu", args.gpu)
        }
        cpu, gpu = got["cpu"], got[args.gpu]
        metric = "personalized_accuracy" if "personalized_accuracy" in cpu[-1] else "accuracy"
        a, b = float(cpu[-1][metric]), float(gpu[-1][metric])
        worst = max(abs(float(x[metric]) - float(y[metric])) for x, y in zip(cpu, gpu, strict=True))
        ok = abs(a - b) <= TOLERANCE
        failed += not ok
        print(f"{method:<10}{metric:<24}{a:>8.4f}{b:>8.4f}{abs(a - b):>8.4f}{worst:>18.4f}  {'PASS' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
