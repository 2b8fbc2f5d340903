"""Device tiers, per-round neuron selection and the server half shared by FedSPU, FjORD and
FedDrop (their client helpers: tier_client.py).

A client's active fraction p comes from what its node reported in the discovery
query (node-config ``active-fraction``, or ``tier`` = index into run-config
``tiers``); a simulated node reports neither, so p follows the partition id in equal
contiguous clusters over ``tiers`` (spec §3: ids 0-19 -> 0.2, ..., 80-99 -> 1.0).

Each round the server picks the kept neurons of every hidden layer (output units are
never masked) and sends them as packed bits in the ``neuron-masks`` record, or as a
seed the client expands (``mask-transport = "seed"``); it sends only the global
values of the induced parameter set (``download_masks``), and the upload carries
exactly that set, so the server averages every parameter over its contributors.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedapp.core.config import ConfigError, RunConfig, float_list, key, one_of, unit_interval
from fedapp.core.masks import model_param_masks, neuron_layout
from fedapp.methods.base import NodeTask, Reply, Scalar, ServerPolicy
from fedapp.methods.early_stop import EarlyStopping
from fedapp.methods.metric_names import CLIENT_ACTIVE_FRACTION, ES_ROUND_CODE
from fedapp.methods.tier_facts import ACTIVE_FRACTION, TIER

RECORD = "neuron-masks"


@dataclass(frozen=True)
class TierParams:
    """Run-config keys of the tiered sub-network methods (fedspu, fjord, feddrop)."""

    tiers: str = key(
        "0.2,0.4,0.6,0.8,1.0",
        float_list,
        numbers=(int, float),
        doc="active fractions of the device tiers; simulated clients fill them in id order",
    )
    early_stopping: bool = key(False, doc="clients stop for good when their train/val loss rises (FedSPU Alg. 2)")
    es_lambda: float = key(0.7, unit_interval, "early-stopping loss = lambda*train loss + (1-lambda)*local-test loss")
    es_compare: str = key(">", one_of(">", ">="), "a client stops when its loss is > (paper) or >= (code) its previous one")
    mask_transport: str = key("bits", one_of("bits", "seed"), "neuron selection sent as packed bits or as a seed the client expands")
    kept_rounding: str = key("floor", one_of("floor", "ceil"), "kept neurons per layer: max(1, floor(p*width)) or ceil(p*width)")

    @property
    def tier_values(self) -> list[float]:
        return [float(x) for x in self.tiers.split(",")]


def active_fraction(pid: int, facts: dict[str, Any], params: TierParams, num_clients: int) -> float:
    """p for one client: node-config ``active-fraction``, else ``tier``, else its id cluster."""
    tiers = params.tier_values
    if ACTIVE_FRACTION in facts:
        p = facts[ACTIVE_FRACTION]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise ConfigError(f"node-config key 'active-fraction' = {p!r} (partition-id {pid}) is not allowed: expected a number in (0, 1]")
        return float(p)
    if TIER in facts:
        t = facts[TIER]
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < len(tiers):
            raise ConfigError(
                f"node-config key 'tier' = {t!r} (partition-id {pid}) is not allowed: expected an index 0..{len(tiers) - 1} "
                f"into run-config 'tiers' = {params.tiers!r}"
            )
        return tiers[t]
    return tiers[pid * len(tiers) // num_clients]


def kept_count(width: int, p: float, rounding: str = "floor") -> int:
    """Neurons kept in a layer of ``width`` at fraction p (spec S18: max(1, floor(p*width)))."""
    exact = p * width
    n = math.ceil(exact - 1e-9) if rounding == "ceil" else math.floor(exact + 1e-9)
    return min(width, max(1, n))


def random_neurons(widths: tuple[int, ...], p: float, seed: int, rounding: str = "floor") -> list[np.ndarray]:
    """Uniform random kept neurons per layer, without replacement; all of them when p >= 0.99."""
    rng = np.random.default_rng(seed)
    out = []
    for w in widths:
        m = np.zeros(w, bool)
        m[rng.choice(w, size=w if p >= 0.99 else kept_count(w, p, rounding), replace=False)] = True
        out.append(m)
    return out


def leftmost_neurons(widths: tuple[int, ...], p: float, rounding: str = "floor") -> list[np.ndarray]:
    """Ordered dropout (FjORD): the first kept_count neurons of every layer."""
    return [np.arange(w) < kept_count(w, p, rounding) for w in widths]


def neuron_seed(seed: int, server_round: int, pid: int) -> int:
    """Seed of one client's selection in one round (spec S1: run seed, round, partition id)."""
    return int(np.random.SeedSequence([seed, server_round, pid]).generate_state(1)[0])


class TieredServer(ServerPolicy):
    """Server half shared by the tiered methods: p per client from discovery, per-round
    neuron selection (``neurons``), personalised evaluation, optional early stopping."""

    personalized_eval = True
    score_kind = "trained"  # FedSPU, FedDrop: the client's own model as it last trained it (w0 before that)
    eval_score_stands = True
    params: TierParams

    def __init__(
        self, cfg: RunConfig, params: Any, initial: dict[str, np.ndarray], node_info: dict[int, dict[str, Scalar]], model: torch.nn.Module
    ):
        super().__init__(cfg, params, initial, node_info, model)
        pids = sorted(node_info) or list(range(cfg.num_clients))
        self.p = {pid: active_fraction(pid, node_info.get(pid, {}), params, cfg.num_clients) for pid in pids}
        self.layout = neuron_layout(model)
        per_round = max(1, round(cfg.fraction_train * len(pids)))
        self.es = EarlyStopping(pids, per_round, params.es_compare, params.early_stopping)

    @classmethod
    def check_config(cls, cfg: RunConfig, params: Any) -> None:
        """Seed transport sends only the seed of the random neuron draw (``neurons``), which the
        client expands the same way; a server that picks its neurons otherwise (FjORD: the leftmost
        p*width of every layer, the same every round) has nothing a seed could carry, and its
        clients would train neurons it never sent."""
        if params.mask_transport == "seed" and cls.neurons is not TieredServer.neurons:
            raise ConfigError(
                f"run-config keys 'method' = {cfg.method!r} and 'mask-transport' = 'seed' cannot be combined: its sub-models "
                "are fixed, not a seeded random draw, so a seed cannot carry them; expected mask-transport = 'bits'"
            )

    def neurons(self, server_round: int, pid: int) -> list[np.ndarray]:
        """Kept neurons per hidden layer for this client and round (random by default)."""
        p = self.p[pid]
        return random_neurons(self.layout.widths, p, neuron_seed(self.cfg.seed, server_round, pid), self.params.kept_rounding)

    def select(self, server_round: int, pids: list[int], rng: random.Random) -> list[int]:
        return self.es.select(server_round, rng, online=set(pids))  # pids: the partitions whose nodes are online

    def node_task(self, server_round: int, pid: int) -> NodeTask:
        neurons = self.neurons(server_round, pid)
        task = NodeTask(config={"active-fraction": self.p[pid]})
        if all(m.all() for m in neurons):
            return task  # full model: dense download, nothing to select
        if self.params.mask_transport == "seed":
            task.config["neuron-seed"] = neuron_seed(self.cfg.seed, server_round, pid)
        else:
            task.records[RECORD] = self.layout.pack_neurons(neurons)
        task.download_masks = model_param_masks(self.model, neurons)
        return task

    def eval_config(self, server_round: int, pid: int) -> dict[str, Scalar]:
        return {"active-fraction": self.p[pid]}

    def eval_download(self, server_round: int, pid: int) -> dict[str, np.ndarray] | None:
        """Nothing: the client scores its stored model (w0 before its first round)."""
        return {k: np.zeros(v.shape, bool) for k, v in self.initial.items()}

    def after_round(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        for r in replies:
            if "es-loss" in r.metrics:
                self.es.report(server_round, r.pid, r.metrics["es-loss"])
        row: dict[str, Any] = {
            "active_clients": len(self.es.pool),
            "stopped_clients": len(self.es.stopped),
            CLIENT_ACTIVE_FRACTION: {str(r.pid): self.p[r.pid] for r in sorted(replies, key=lambda r: r.pid)},
        }
        if self.es.first_short_round == server_round:
            row[ES_ROUND_CODE] = server_round
        return row

    def finished(self, server_round: int) -> bool:
        return self.es.finished()

    def state(self) -> dict[str, np.ndarray]:
        return self.es.state()  # neuron draws are seeded by (seed, round, pid): nothing else to keep

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.es.load_state(state)
