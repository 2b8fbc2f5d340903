"""Process-level settings: torch/BLAS threads = the CPUs a client is given, and whether GPU
kernels must be reproducible.

Oversubscribed BLAS threads made small training runs 10-20x slower on 2 cores, so
every entry point (ServerApp, ClientApp, in-process engine) calls this first.
"""

from __future__ import annotations

import contextlib
import os

import torch

_configured: int | None = None


def configure_threads(n: int) -> None:
    global _configured
    if _configured == n:
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)
    torch.set_num_threads(n)
    with contextlib.suppress(RuntimeError):  # settable only before the first parallel op
        torch.set_num_interop_threads(n)
    _configured = n


CUBLAS_WORKSPACE = ":4096:8"  # what cuBLAS needs for deterministic results (CUDA docs, "Results reproducibility")


def configure_determinism(deterministic: bool) -> None:
    """``deterministic``: only deterministic torch algorithms (an op without one raises, naming
    itself), cuDNN's deterministic convolutions without benchmarking, and a fixed cuBLAS
    workspace (read when cuBLAS starts: set before the process's first CUDA matmul). Otherwise
    cuDNN benchmarks the convolution algorithms of each new shape and keeps the fastest, which
    is what the batched engine's grouped convolutions want. CPU results are the same either way."""
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic
