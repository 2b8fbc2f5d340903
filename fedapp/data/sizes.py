"""How many local training and local test samples each client holds, from the split's
index arrays alone (no features are built).

The split is deterministic in the run-config, so the server knows every partition's size
without asking: a reply that claims to have trained on more samples than its partition holds
is lying, and a personalised evaluation over an empty local test split is refused up front.
Mirrors the branches of ``fedapp.data.client_data`` (a test checks the two agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fedapp.core.config import RunConfig
from fedapp.data import client_indices, shard_split
from fedapp.data.partition import local_split


@dataclass(frozen=True)
class SplitSize:
    train: int
    test: int


@lru_cache(maxsize=4)
def split_sizes(cfg: RunConfig) -> tuple[SplitSize, ...]:
    """Per partition id: the sizes of the local train and local test splits ``client_data`` builds."""
    out = []
    for pid in range(cfg.num_clients):
        if cfg.partition == "shard":
            split = shard_split(cfg)
            if cfg.local_test_source == "test-set":
                out.append(SplitSize(split.train[pid].size, split.test[pid].size))
                continue
            if split.rest[pid].size:
                out.append(SplitSize(split.train[pid].size, split.rest[pid].size))
                continue
        train, test = local_split(client_indices(cfg)[pid], cfg.local_test_fraction, cfg.data_seed * 100_003 + pid)
        out.append(SplitSize(train.size, test.size))
    return tuple(out)
