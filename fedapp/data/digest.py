"""A digest of one client's data as loaded (after reading, partitioning, the local split and
normalisation): two runs on "the same" data can be compared by it, node by node."""

from __future__ import annotations

import hashlib

import numpy as np

from fedapp.data.dataset import ClientData


def data_digest(data: ClientData) -> str:
    """sha256 over each split's dtype, shape and bytes (train inputs, labels, then the local test split)."""
    h = hashlib.sha256()
    for arr in (data.x_train, data.y_train, data.x_test, data.y_test):
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()
