"""Poisoned clients, for tests and benchmarks only (never a run-config key): the real ClientApp,
whose train reply a wrapper rewrites on its way out for the chosen partitions, i.e. what a
compromised node sends. The reply stays well-formed (same arrays, masks, dtypes, sample count),
so only the aggregation rule stands between it and the model.

Attacks, per sent entry v with global value g (the entries the honest reply would have sent):

* ``flip10``: g - 10 (v - g), the update sign-flipped and scaled ten times;
* ``constant``: 0.5 everywhere;
* ``flip``: g - (v - g), the update sign-flipped at its honest size (under any norm bound
  that lets honest replies through);
* ``walk``: g + 0.99 x 10^4 x max(1, largest |g| of the tensor), every entry, just under the
  step bound as it was measured on the current global model.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedapp.client.cache import process_model, resolve_once
from fedapp.client.handlers import handle_train, load_global, node_local
from fedapp.core import wire
from fedapp.core.device import host_arrays
from fedapp.data import dataset_for
from fedapp.engine.local_grid import LocalGrid
from fedapp.server.loop import serve
from fedapp.server.reply_checks import MAX_STEP
from fedapp.sim.run_local import full_config
from tests.client_apps import app_with_train

Attack = Callable[[np.ndarray, np.ndarray, float], np.ndarray]  # (sent values, global values there, tensor scale) -> values

ATTACKS: dict[str, Attack] = {
    "flip10": lambda v, g, s: g - 10.0 * (v - g),
    "constant": lambda v, g, s: np.full_like(v, 0.5),
    "flip": lambda v, g, s: g - (v - g),
    "walk": lambda v, g, s: g + 0.99 * MAX_STEP * s,
}


def no_cache(arrays: dict[str, np.ndarray], masks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    raise AssertionError("a downlink = full message never reads the model cache")


def poison(msg: Message, reply: Message, context: Context, attack: Attack) -> Message:
    """``reply`` (to the train task ``msg``) with every sent float entry rewritten by ``attack``."""
    cfg = node_local(resolve_once(context.run_config)[0], context.node_config)
    pm = process_model(cfg, dataset_for(cfg), torch.device("cpu"))
    load_global(pm, msg.content, no_cache)  # the attacks run with downlink = full: the message holds every entry
    current = host_arrays(pm.model.state_dict())
    sent = wire.decode(reply.content.array_records["values"], reply.content.array_records.get("mask"), current, 1.0)
    out = {}
    for name, v in sent.values.items():
        flat = current[name].reshape(-1).astype(np.float64)
        mask = sent.masks.get(name)
        g = flat if mask is None else flat[mask]
        scale = max(1.0, float(np.abs(flat).max(initial=0.0)))
        out[name] = attack(v.reshape(-1).astype(np.float64), g, scale).astype(v.dtype).reshape(v.shape)
    reply.content["values"] = wire.to_record(out)
    return reply


def poisoned_app(attack: str, bad: Collection[int], rounds: Collection[int] | None = None) -> ClientApp:
    """The real ClientApp; the partitions in ``bad`` send ``attack``'s reply (in ``rounds`` only, if given)."""
    rewrite = ATTACKS[attack]

    def _train(msg: Message, context: Context) -> Message:
        reply = handle_train(msg, context)
        config = msg.content.config_records["config"]
        pid, rnd = int(config["partition-id"]), int(config["server-round"])  # type: ignore[arg-type]
        if pid in bad and (rounds is None or rnd in rounds) and not reply.has_error():
            return poison(msg, reply, context, rewrite)
        return reply

    return app_with_train(_train)


def run_poisoned(overrides: Mapping[str, Any], attack: str, bad: Collection[int], rounds: Collection[int] | None = None) -> Path:
    """A whole in-process federation (one node per partition) where ``bad`` send ``attack``; the run folder."""
    raw = full_config(dict(overrides))
    nodes = int(raw["num-clients"])
    grid = LocalGrid(poisoned_app(attack, bad, rounds), raw, nodes, [{"num-partitions": nodes} for _ in range(nodes)])
    try:
        return serve(grid, raw, discovery_timeout=30)
    finally:
        grid.close()
