"""Peak memory of a 100-client Dirichlet split of CIFAR-10 in one process.

Writes a full-size CIFAR-10 in torchvision's on-disk format (cifar-10-batches-py/,
50,000 + 10,000 random 3x32x32 uint8 images, random labels) to a temp folder, then in a
fresh child process measures resident memory (VmRSS) and its peak (VmHWM, reset between
stages through /proc/self/clear_refs) while it
  1. imports everything the later stages use (torch, torchvision, flwr, Flower Datasets),
  2. loads cifar10 through the real loader (torchvision),
  3. computes the 100-client Dirichlet(0.5) split,
  4. builds every client's data once, as the 100 per-message jobs of one round would,
  5. evaluates a CNN on the 10,000 test images (batches of 1024 normalised on the fly),
  6. runs one FedAvg round with all 100 clients in the in-process engine (server and
     clients in this one process, model=cnn, one local step each).
"One copy of the data" is the stored uint8 arrays: 184.3 MB (float32 would be 737.3 MB).

    PYTHONPATH=. python bench/data_memory.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MB = 1e6


def write_full_cifar10(root: Path) -> None:
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from tests.data_files import write_cifar10

    rng = np.random.default_rng(0)
    counts = np.bincount(rng.integers(0, 10, 50_000), minlength=10).tolist()
    test_counts = np.bincount(rng.integers(0, 10, 10_000), minlength=10).tolist()
    write_cifar10(root, counts, test_counts, seed=0)


def status() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024 / MB
    return out


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def measure(root: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []

    def stage(name: str, start: float) -> None:
        s = status()
        secs = round(time.perf_counter() - start, 1)
        rows.append({"stage": name, "rss_mb": round(s["VmRSS"], 1), "peak_mb": round(s["VmHWM"], 1), "seconds": secs})
        reset_peak()

    t = time.perf_counter()
    import datasets  # noqa: F401  (Hugging Face, used by Flower Datasets' partitioners)
    import flwr_datasets.partitioner  # noqa: F401
    import torch
    import torchvision.datasets  # noqa: F401

    import client_app  # noqa: F401
    from fedapp.core.config import RunConfig
    from fedapp.core.evaluate import evaluate
    from fedapp.data import client_data, client_indices, dataset_for, load_dataset
    from fedapp.models import build_model
    from fedapp.sim.run_local import run_local

    stage("imports (baseline)", t)
    overrides = {"dataset": "cifar10", "data-root": root, "partition": "dirichlet", "dirichlet-alpha": 0.5, "num-clients": 100}
    cfg = RunConfig(dataset="cifar10", data_root=root, partition="dirichlet", dirichlet_alpha=0.5, num_clients=100)
    t = time.perf_counter()
    ds = dataset_for(cfg)
    stage("load cifar10 (uint8, one copy)", t)
    t = time.perf_counter()
    parts = client_indices(cfg)
    stage("100-client Dirichlet split", t)
    t = time.perf_counter()
    biggest = 0
    for pid in range(100):
        biggest = max(biggest, client_data(cfg, pid).x_train.nbytes)
    stage("client_data for all 100 clients", t)
    t = time.perf_counter()
    model = build_model(RunConfig(model="cnn"), ds.in_shape, ds.num_classes, seed=0)
    assert ds.norm is not None
    evaluate(model, torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test), prepare=ds.norm.tensor)
    del model
    stage("central eval of the 10,000 test images (CNN)", t)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        run_local({**overrides, "model": "cnn", "num-server-rounds": 1, "local-steps": 1, "batch-size": 32, "run-dir": run_dir})
    stage("1 FedAvg round, 100 clients in-process", t)
    loads = load_dataset.cache_info().misses  # reads from disk in this process (server + 100 clients)
    stored = ds.x_train.nbytes + ds.x_test.nbytes + ds.y_train.nbytes + ds.y_test.nbytes
    rows.append({
        "stored_mb": round(stored / MB, 1), "float32_copy_mb": round((ds.x_train.nbytes + ds.x_test.nbytes) * 4 / MB, 1),
        "index_arrays_mb": round(sum(p.nbytes for p in parts) / MB, 2), "largest_client_float32_mb": round(biggest / MB, 1),
        "dataset_reads": loads,
    })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--keep", help="write the CIFAR-10 files here and keep them (default: a temp folder)")
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        if not (root / "cifar-10-batches-py" / "test_batch").exists():
            write_full_cifar10(root)
        env_cmd = [sys.executable, __file__, "--measure", str(root)]
        out = subprocess.run(env_cmd, check=True, capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{'stage':46s} {'RSS MB':>8s} {'peak MB':>8s} {'s':>6s}")
    for r in rows[:-1]:
        print(f"{r['stage']:46s} {r['rss_mb']:8.1f} {r['peak_mb']:8.1f} {r['seconds']:6.1f}")
    print(json.dumps(rows[-1]))


if __name__ == "__main__":
    main()
