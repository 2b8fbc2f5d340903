"""Loss-based early stopping of clients (FedSPU Alg. 2), kept on the server (spec S14).

Each participation a client reports L = lambda*L_train + (1 - lambda)*L_val. It stops
for good the first time L exceeds (``>``; or ``>=``) its value at its *previous
participation*; a first participation never stops. The server samples only from the
pool of non-stopped clients, all of them once fewer than K remain, and the run ends
when the pool is empty. A client whose node is offline is not sampled, but not stopped
either: it is back in the draw once its node rejoins. Living here rather than on the
client, the registry survives SuperNode restarts and needs no client state.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np


@dataclass
class EarlyStopping:
    clients: list[int]
    per_round: int  # K
    compare: str = ">"
    enabled: bool = True
    last: dict[int, float] = field(default_factory=dict)  # L at the previous participation
    stopped: dict[int, int] = field(default_factory=dict)  # pid -> round it stopped
    first_short_round: int | None = None  # first round with fewer than K clients to sample (spec S13)

    @property
    def pool(self) -> list[int]:
        return [p for p in self.clients if p not in self.stopped]

    def select(self, server_round: int, rng: random.Random, online: Collection[int] | None = None) -> list[int]:
        """K clients of the pool whose nodes are ``online`` (None: all); the short round counts
        stopped clients only, as the spec's ES round does."""
        pool = self.pool
        if len(pool) < self.per_round and self.first_short_round is None:
            self.first_short_round = server_round
        if online is not None:
            pool = [p for p in pool if p in online]
        return sorted(rng.sample(pool, min(self.per_round, len(pool))))

    def worse(self, new: float, old: float) -> bool:
        return new >= old if self.compare == ">=" else new > old

    def report(self, server_round: int, pid: int, loss: float) -> bool:
        """Record one participation's loss; True when the client stops now."""
        prev = self.last.get(pid)
        self.last[pid] = loss
        if self.enabled and pid not in self.stopped and prev is not None and self.worse(loss, prev):
            self.stopped[pid] = server_round
            return True
        return False

    def finished(self) -> bool:
        return self.enabled and not self.pool

    def state(self) -> dict[str, np.ndarray]:
        """Arrays for the server checkpoint: (pid, last loss), (pid, stop round), first short round."""
        return {
            "es-last": np.array(sorted(self.last.items()), np.float64).reshape(-1, 2),
            "es-stopped": np.array(sorted(self.stopped.items()), np.int64).reshape(-1, 2),
            "es-first-short": np.array(-1 if self.first_short_round is None else self.first_short_round, np.int64),
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if "es-last" not in state:
            return
        self.last = {int(p): float(v) for p, v in state["es-last"]}
        self.stopped = {int(p): int(r) for p, r in state["es-stopped"]}
        first = int(state["es-first-short"])
        self.first_short_round = None if first < 0 else first
