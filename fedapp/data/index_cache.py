"""Index arrays computed once per machine and kept on disk.

Some index arrays cost a process far more to compute than to read: the digits split needs
scikit-learn (1.5-2.5 s to import), Flower Datasets' partitioners need Hugging Face
``datasets`` (pyarrow and pandas, ~0.7 s). Every simulation worker would pay that before
its first round. The server builds the split before it contacts any client, so with the
result on disk the workers read a few index arrays instead.

Files live in ``FEDAPP_CACHE_DIR`` (default ``$XDG_CACHE_HOME/fedapp`` or
``~/.cache/fedapp``); a file name carries everything the arrays depend on. A file that is
missing, unreadable or fails the caller's check is computed again, and one that cannot be
written (a read-only home) only costs the next process the same computation.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fedapp.core.atomic import write_atomic

Arrays = dict[str, np.ndarray]


def cache_dir() -> Path:
    own = os.environ.get("FEDAPP_CACHE_DIR")
    if own:
        return Path(own)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedapp"


def cached_indices(name: str, compute: Callable[[], Arrays], valid: Callable[[Arrays], bool]) -> Arrays:
    """Integer arrays by name from ``cache_dir()/name`` when that file holds ones ``valid``
    accepts, else ``compute()`` (stored for the next process)."""
    path = cache_dir() / name
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {key: f[key] for key in f.files}
        if all(a.dtype.kind == "i" and a.ndim == 1 for a in arrays.values()) and valid(arrays):
            return arrays
    except (OSError, ValueError, KeyError, EOFError):
        pass  # missing or damaged: compute it again
    arrays = compute()
    with contextlib.suppress(OSError):  # whole or not at all, with many processes writing at once
        write_atomic(path, lambda out: np.savez(out, **arrays))  # type: ignore[arg-type]
    return arrays
