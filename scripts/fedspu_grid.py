"""The FedSPU digits grid (docs/results-fedspu.md): 3 alphas x 3 seeds x 4 methods,
one run after another in this one process (imports paid once), resumable: a run
folder that holds model.npz is finished and skipped.

    nice -n 10 env PYTHONPATH=. .venv/bin/python scripts/fedspu_grid.py [runs/fedspu-grid [ALPHA ...]] > grid.log 2>&1

ALPHA ...: only those Dirichlet alphas (e.g. 0.1: a third of the grid); default all three.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from fedapp.core.config import load_toml_config
from fedapp.server.progress import grid_bar, quiet_rounds
from fedapp.sim.run_local import run_local

ALPHAS = (0.1, 0.5, 1.0)
SEEDS = (0, 1, 2)
METHODS: dict[str, dict[str, Any]] = {
    "fedspu": {"method": "fedspu"},
    "fedspu-es": {"method": "fedspu", "early-stopping": True},
    "fjord": {"method": "fjord"},
    "feddrop": {"method": "feddrop"},
}


def main(root: str = "runs/fedspu-grid", *alphas: str) -> None:
    base: dict[str, Any] = load_toml_config(Path(__file__).resolve().parents[1] / "configs" / "fedspu-digits.toml")
    todo = [
        (Path(root) / f"a{alpha}-{name}-seed{seed}", {**extra, "dirichlet-alpha": alpha, "seed": seed})
        for alpha in ([float(a) for a in alphas] or ALPHAS)
        for name, extra in METHODS.items()
        for seed in SEEDS
    ]
    todo = [(run_dir, extra) for run_dir, extra in todo if not (run_dir / "model.npz").exists()]
    quiet_rounds()
    with grid_bar(len(todo)) as bar:
        for run_dir, extra in todo:
            shutil.rmtree(run_dir, ignore_errors=True)
            start = time.perf_counter()
            run_local({**base, **extra, "run-dir": str(run_dir)})
            bar.done(f"done {run_dir} in {time.perf_counter() - start:.0f}s")


if __name__ == "__main__":
    main(*sys.argv[1:])
