"""Half-precision wire on digits, every method: final accuracy and serialized traffic per
``wire-dtype``, mean ± std over seeds, against float32 (docs/downlink.md).

    PYTHONPATH=. nice python bench/wire_dtype_digits.py OUT [--rounds 6] [--seeds 0 1 2] [--methods fedavg ...]

Short runs (MLP, 4 clients, one local epoch): the accuracy change is a smoke check of the rounding,
not a convergence study. Each run's folder is OUT/<method>-<dtype>-seed<s>; the table goes to
stdout and OUT/table.md."""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Any

from fedapp.client_app import app
from fedapp.core.config import ConfigError
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.registry import MODULES
from fedapp.server.loop import serve
from fedapp.sim.run_local import full_config

BASE = {"dataset": "digits", "model": "mlp", "partition": "iid", "num-clients": 4, "local-epochs": 1, "lr": 0.1}
EXTRA: dict[str, dict[str, Any]] = {
    "fedpart": {"warmup-rounds": 2, "cycles": 1, "rounds-per-layer": 1, "full-rounds-between-cycles": 0},
}


def one(out: Path, method: str, dtype: str, seed: int, rounds: int) -> list[dict[str, Any]]:
    over = {**BASE, **EXTRA.get(method, {}), "method": method, "wire-dtype": dtype, "seed": seed, "num-server-rounds": rounds}
    run_dir = out / f"{method}-{dtype}-seed{seed}"
    try:
        raw = full_config({**over, "run-dir": str(run_dir), "overwrite": True})
        serve(LocalGrid(app, raw, 4), raw, discovery_timeout=5.0)
    except ConfigError as err:
        fixed = re.search(r"set num-server-rounds = (\d+)", str(err))
        if not fixed:
            raise
        raw = full_config({**over, "num-server-rounds": int(fixed.group(1)), "run-dir": str(run_dir), "overwrite": True})
        serve(LocalGrid(app, raw, 4), raw, discovery_timeout=5.0)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def final_acc(rows: list[dict[str, Any]]) -> float:
    personal = [r["personalized_accuracy"] for r in rows if r.get("personalized_accuracy") is not None]
    return 100 * (personal[-1] if personal else rows[-1]["accuracy"])


def cell(values: list[float], fmt: str = ".2f") -> str:
    return f"{statistics.mean(values):{fmt}}" + (f" ± {statistics.stdev(values):{fmt.lstrip('+')}}" if len(values) > 1 else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(MODULES))
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16"])
    args = ap.parse_args()
    out = Path(args.out)
    lines = [
        "| method | wire-dtype | rounds | final accuracy % | Δ vs float32 (points, paired) | MB down | MB up | total / float32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method in args.methods:
        ref: dict[int, tuple[float, float]] = {}
        for dtype in args.dtypes:
            accs, downs, ups, deltas, shares, rounds = [], [], [], [], [], 0
            for seed in args.seeds:
                rows = one(out, method, dtype, seed, args.rounds)
                acc, down, up = final_acc(rows), sum(r["wire_bytes_down"] for r in rows), sum(r["wire_bytes_up"] for r in rows)
                rounds = len(rows)
                if dtype == "float32":
                    ref[seed] = (acc, down + up)
                accs.append(acc)
                downs.append(down / 1e6)
                ups.append(up / 1e6)
                if seed in ref:
                    deltas.append(acc - ref[seed][0])
                    shares.append((down + up) / ref[seed][1] if ref[seed][1] else float("nan"))
            lines.append(
                f"| {method} | {dtype} | {rounds} | {cell(accs)} | {cell(deltas, '+.2f')} | {cell(downs, '.3f')} | "
                f"{cell(ups, '.3f')} | {cell(shares, '.3f')} |"
            )
            print(lines[-1], flush=True)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
