"""An in-memory StateStore for client-policy unit tests (runs use ContextStore or DiskStore)."""

from __future__ import annotations

import numpy as np

from fedapp.core.state import check_key


class MemoryStore:
    """Plain dict store: records copied in and out, keyed by (partition, key)."""

    def __init__(self) -> None:
        self._data: dict[tuple[int, str], dict[str, np.ndarray]] = {}

    def load(self, partition: int, key: str) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self._data.get((partition, check_key(key)), {}).items()}

    def save(self, partition: int, key: str, arrays: dict[str, np.ndarray]) -> None:
        self.save_all(partition, {key: arrays})

    def save_all(self, partition: int, records: dict[str, dict[str, np.ndarray]]) -> None:
        for key, arrays in records.items():
            self._data[(partition, check_key(key))] = {k: np.array(v, copy=True) for k, v in arrays.items()}
