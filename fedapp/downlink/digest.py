"""Digests of a model's tensors, the same on server and client: what lets the server send only
what changed and lets a node prove that the model it rebuilt from its cache is the server's."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np


def tensor_digest(name: str, a: np.ndarray) -> str:
    """Name, dtype, shape and C-order bytes of one tensor (128-bit BLAKE2b, hex)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{name}\0{np.dtype(a.dtype).str}\0{tuple(a.shape)}\0".encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def tensor_digests(arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    return {n: tensor_digest(n, a) for n, a in arrays.items()}


def model_digest(per_tensor: Mapping[str, str]) -> str:
    """One digest of a whole model from its tensors' digests (order-independent: sorted by name)."""
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(per_tensor):
        h.update(f"{name}\0{per_tensor[name]}\n".encode())
    return h.hexdigest()


def digest_of(arrays: Mapping[str, np.ndarray]) -> str:
    return model_digest(tensor_digests(arrays))
