"""Process-level settings: torch/BLAS threads = the CPUs a client is given.

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
