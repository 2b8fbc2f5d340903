"""Local-only baseline: every coordinate personal from round 1, nothing on the wire.

Each client trains its own model (the seeded initial model, built identically on
every node) for ``local-epochs`` per round and is evaluated on its local test split.
The server sends nothing and receives only metrics; its global model never moves.
"""

from __future__ import annotations

import numpy as np
from torch import nn

from fedapp.methods.base import Method, NodeTask
from fedapp.methods.personal import Masks, PersonalClient, PersonalServer, eligible


class LocalClient(PersonalClient):
    def initial_mask(self, model: nn.Module) -> Masks:
        return {n: np.ones(s, bool) for n, s in eligible(model).items()}


class LocalServer(PersonalServer):
    def node_task(self, server_round: int, pid: int) -> NodeTask:
        return NodeTask(download_masks={k: np.zeros(v.shape, bool) for k, v in self.initial.items()})


METHOD = Method("local", LocalServer, LocalClient)
