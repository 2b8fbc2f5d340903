"""The FedPeWS experiment grid (docs/results-fedpews.md): the paper's synthetic settings
(Table 2 cols 1-4, Table 6 cols 1 and 4, Sec. 5.3 N = 4), the digits check (E6) and the
N = 4 sweeps over mask init, tau, eta_g, local steps, optimizer and the mask options, 3 seeds each.

Runs are in-process (`run_local`), `--jobs` at a time in spawned workers with 1 torch
thread each (`num-threads` = 1, set by the server loop), in the order listed (paper settings first). Resumable: a run folder that
holds model.npz is finished and skipped.

    nice -n 10 env PYTHONPATH=. .venv/bin/python scripts/fedpews_grid.py runs/fedpews-grid \
        --jobs 2 [--groups n4,e5] [--seeds 0,1] [--client-batch auto] > grid.log 2>&1
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import time
from pathlib import Path
from typing import Any

from fedapp.core.runtime import configure_threads
from fedapp.server.progress import grid_bar, quiet_rounds

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (0, 1, 2)

N2 = {"fedavg": "synthetic32k-n2-fedavg", "fedpews": "fedpews-synthetic32k-n2", "fixed": "fedpews-fixed-synthetic32k-n2"}
N4 = {"fedavg": "fedavg-synthetic32k-n4", "fedpews": "fedpews-synthetic32k-n4", "fixed": "fedpews-fixed-synthetic32k-n4"}
E5 = {"fedavg": "fedavg-synthetic3.2k-n2", "fedpews": "fedpews-synthetic3.2k-n2"}

# Table 2 columns 2 and 3 (32K, N = 2): eta_g / lambda / tau / T / target.
COL2 = {"server-lr": 0.5, "num-server-rounds": 250, "target-accuracy": 0.9}
COL3 = {"server-lr": 0.25, "num-server-rounds": 400, "target-accuracy": 0.75}

# group -> list of (run name, config file stem, overrides)
Entry = tuple[str, str, dict[str, Any]]
GROUPS: dict[str, list[Entry]] = {
    "n2": [(k, v, {}) for k, v in N2.items()],
    "n4": [(k, v, {}) for k, v in N4.items()],
    "e5": [(k, v, {}) for k, v in E5.items()],
    "prox-n2": [
        ("fedprox", "fedprox-synthetic32k-n2", {}),
        ("fedprox-pews", "fedprox-pews-synthetic32k-n2", {}),
    ],
    "prox-e5": [
        ("fedprox", E5["fedavg"], {"method": "fedprox", "proximal-mu": 0.01}),
        ("fedprox-pews", E5["fedpews"], {"base": "fedprox", "proximal-mu": 0.01, "diversity-weight": 1.0}),
    ],
    "digits": [
        ("fedavg", "fedavg-digits-n2", {}),
        ("fedpews", "fedpews-digits-n2", {}),
        ("fixed", "fedpews-fixed-digits-n2", {}),
    ],
    "n2-col2": [
        ("fedavg", N2["fedavg"], COL2),
        ("fedpews", N2["fedpews"], {**COL2, "diversity-weight": 2.0, "warmup-fraction": 0.2}),
    ],
    "n2-col3": [
        ("fedavg", N2["fedavg"], COL3),
        ("fedpews", N2["fedpews"], {**COL3, "diversity-weight": 1.0, "warmup-fraction": 0.1875}),
    ],
    # Centralised reference for N = 4: one client holds all four classes, same steps per round.
    "n4-central": [("central", N4["fedavg"], {"partition": "0,1,2,3", "num-clients": 1})],
    # N = 4 sweeps: the spec's suggestions and the list (local steps, mask init, tau, eta_g, optimizer).
    "n4-pews-options": [
        ("fedpews-init-1", N4["fedpews"], {"mask-init": -1.0}),
        ("fedpews-init1", N4["fedpews"], {"mask-init": 1.0}),
        ("fedpews-init3", N4["fedpews"], {"mask-init": 3.0}),
        ("fedpews-tau0.125", N4["fedpews"], {"warmup-fraction": 0.125}),
        ("fedpews-tau0.5", N4["fedpews"], {"warmup-fraction": 0.5}),
        ("fedpews-lambda5", N4["fedpews"], {"diversity-weight": 5.0}),
        ("fedpews-shared", N4["fedpews"], {"mask-draw": "shared"}),
        ("fedpews-activation", N4["fedpews"], {"mask-impl": "activation"}),
        ("fedpews-masklr1", N4["fedpews"], {"mask-lr": 1.0}),
        ("fedpews-masklr10", N4["fedpews"], {"mask-lr": 10.0}),
        ("fedpews-ste-identity", N4["fedpews"], {"ste": "identity"}),
        ("fedpews-extent-rows", N4["fedpews"], {"mask-extent": "rows"}),
    ],
    "n4-both": [
        (f"{m}-{tag}", N4[m], extra)
        for tag, extra in (
            ("eta0.5", {"server-lr": 0.5}),
            ("eta0.25", {"server-lr": 0.25}),
            ("steps50", {"local-steps": 50}),
            ("momentum0.9", {"momentum": 0.9}),
            ("epochs2", {"local-epochs": 2}),
        )
        for m in ("fedavg", "fedpews")
    ],
}


def run_one(job: tuple[str, str, dict[str, Any]]) -> str:
    """One run in this worker process; returns a log line."""
    run_dir, stem, overrides = job
    from fedapp.core.config import load_toml_config
    from fedapp.sim.run_local import run_local

    base = load_toml_config(ROOT / "configs" / f"{stem}.toml")
    shutil.rmtree(run_dir, ignore_errors=True)
    start = time.perf_counter()
    run_local({**base, **overrides, "run-dir": run_dir})
    return f"done {run_dir} in {time.perf_counter() - start:.0f}s"


def jobs_for(
    root: Path, groups: list[str], seeds: tuple[int, ...] = SEEDS, only: frozenset[str] = frozenset()
) -> list[tuple[str, str, dict[str, Any]]]:
    """Unfinished runs, seed-major inside each group so that partial grids already pair up."""
    out = []
    for group in groups:
        if group not in GROUPS:
            raise SystemExit(f"unknown group {group!r}; expected one of {', '.join(GROUPS)}")
        for seed in seeds:
            for name, stem, extra in GROUPS[group]:
                if only and name not in only:
                    continue
                run_dir = root / group / f"{name}-seed{seed}"
                if not (run_dir / "model.npz").exists():
                    out.append((str(run_dir), stem, {**extra, "seed": seed}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="runs/fedpews-grid")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--groups", default=",".join(GROUPS), help=f"comma list of {', '.join(GROUPS)}")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma list of seeds")
    parser.add_argument("--only", default="", help="comma list of run names inside the groups (default: all)")
    parser.add_argument("--client-batch", default="1", help="run-config client-batch of every run")
    args = parser.parse_args()
    configure_threads(1)  # the env vars reach the spawned workers before they load BLAS; serve() sets torch's own
    jobs = jobs_for(
        Path(args.root),
        args.groups.split(","),
        tuple(int(s) for s in args.seeds.split(",")),
        frozenset(filter(None, args.only.split(","))),
    )
    if args.client_batch != "1":
        jobs = [(run_dir, stem, {**over, "client-batch": args.client_batch}) for run_dir, stem, over in jobs]
    print(f"{len(jobs)} runs to do", flush=True)
    with grid_bar(len(jobs)) as bar, multiprocessing.get_context("spawn").Pool(args.jobs, initializer=quiet_rounds) as pool:
        for line in pool.imap_unordered(run_one, jobs):
            bar.done(line)


if __name__ == "__main__":
    main()
