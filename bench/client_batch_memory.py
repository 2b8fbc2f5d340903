"""``client-batch = auto``'s memory estimate against the peak a chunk really allocates.

For a chunk of k clients this builds what the in-process engine's lanes hold on the device
(each client's model, its train and test data, its method state: FedProx's anchor, FedSelect's
personal and shared gradient masks, a FedPeWS warm-up's loop, scores and reference) and trains
them with the engine's own kernel call (``fedapp.engine.batched_executor.kernel``). On the CPU
the peak is read from ``torch.profiler``'s memory events (``profile_memory``): the highest
running total of the allocator's allocations and frees, counted from before the first lane;
on CUDA it is ``torch.cuda.max_memory_allocated`` above the level before the first lane. It
prints that next to ``fedapp.engine.client_batch_size.chunk_bytes`` for the same k.

    PYTHONPATH=. python bench/client_batch_memory.py [--k 2,4,8] [--device cuda] [--cases cnn,mlp]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chunk_memory import CASES, config, estimate, measure


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--k", default="2,4,8", help="clients per chunk (comma-separated)")
    ap.add_argument("--device", default="cpu", help="cpu (profiler memory events) or cuda (max_memory_allocated)")
    ap.add_argument("--cases", default=",".join(CASES), help="which of the cases (comma-separated)")
    args = ap.parse_args()
    print(f"device {args.device}, torch {torch.__version__}")
    print(f"{'case':20} {'k':>3} {'estimate MiB':>13} {'measured MiB':>13} {'ratio':>6}")
    for name in args.cases.split(","):
        raw = config(name)
        for k in (int(v) for v in args.k.split(",")):
            if args.device != "cpu":  # once first: cuDNN's one-off workspace and algorithm choice are the process's
                measure(raw, k, args.device)
            est, got = estimate(raw, k, args.device), measure(raw, k, args.device)
            print(f"{name:20} {k:3d} {est / 2**20:13.3f} {got / 2**20:13.3f} {est / got:6.3f}")


if __name__ == "__main__":
    main()
