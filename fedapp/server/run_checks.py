"""Run-config checks that need several keys, the dataset or the model's size.

``fedapp.core.config.parse`` checks each key alone (type, range, finiteness). What it cannot see
is checked here, once, at server start: after the dataset and its split are known and before
discovery, the model or any training. Each failure is one line naming the keys, their values
and what is allowed. Sizes are computed without allocating: the model is built on torch's
meta device and the split from its index arrays.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import torch

from fedapp.core.config import ConfigError, RunConfig, coerce, defaults_of, fields_of
from fedapp.data import Dataset
from fedapp.data.sizes import SplitSize, split_sizes
from fedapp.methods.base import Method
from fedapp.methods.proximal import proximal_mu, uses_prox
from fedapp.methods.registry import MODULES, get_method

log = logging.getLogger("flwr")

# The server keeps the global model, a float64 sum and weight per parameter while it averages,
# and every reply of the round: 2**27 parameters (512 MiB as float32) bounds that to a few GiB.
MAX_PARAMETERS = 2**27
# train.batches draws the whole local run's minibatch order before the first step: about
# 1 KiB per minibatch (a tensor object) plus 8 bytes per sample index.
MAX_DRAWN_BYTES = 512 * 2**20
BYTES_PER_BATCH = 1024


def check_run(cfg: RunConfig, method: Method, params: Any, raw: Mapping[str, Any], ds: Dataset) -> list[str]:
    """Raise ConfigError for a run that cannot do what it asks; return warnings (keys it ignores)."""
    sizes = split_sizes(cfg)
    check_min_replies(cfg)
    check_sgd_decay(cfg)
    check_local_work(cfg, method, sizes)
    check_model_size(cfg, ds)
    check_local_tests(cfg, method, sizes)
    method.server.check_config(cfg, params)
    return unused_keys(raw, cfg, method)


def sampled_per_round(cfg: RunConfig) -> int:
    """Clients a round samples at the start (ServerPolicy.select)."""
    return min(cfg.num_clients, max(1, round(cfg.fraction_train * cfg.num_clients)))


def check_min_replies(cfg: RunConfig) -> None:
    k = sampled_per_round(cfg)
    if cfg.min_replies > k:
        raise ConfigError(
            f"run-config key 'min-replies' = {cfg.min_replies} is not allowed: a round samples {k} client(s) "
            f"(num-clients {cfg.num_clients} x fraction-train {cfg.fraction_train}), so the model would never change; "
            f"expected 1..{k}"
        )


def check_sgd_decay(cfg: RunConfig) -> None:
    """SGD's weight decay and FedProx's proximal term are a quadratic pull of curvature
    c = weight-decay + proximal-mu; heavy-ball SGD (torch's momentum) is stable on it only while
    lr x c < 2 x (1 + momentum). Beyond that the weights grow every step whatever the data, and
    every reply overflows or fails the step bound: a run that trains nothing."""
    if cfg.optimizer != "sgd":
        return
    prox = uses_prox(cfg)
    mu = proximal_mu(cfg)
    pull, limit = cfg.weight_decay + mu, 2 * (1 + cfg.momentum)
    if cfg.lr * pull >= limit:
        raise ConfigError(
            f"run-config keys 'lr' = {cfg.lr:g}, 'weight-decay' = {cfg.weight_decay:g}"
            + (f", 'proximal-mu' = {mu:g}" if prox else "")
            + f" and 'momentum' = {cfg.momentum:g} make SGD diverge: lr x (weight-decay"
            + (" + proximal-mu" if prox else "")
            + f") = {cfg.lr * pull:g}; expected less than 2 x (1 + momentum) = {limit:g}"
        )


def check_local_work(cfg: RunConfig, method: Method, sizes: tuple[SplitSize, ...]) -> None:
    """Some local training, and a minibatch order (drawn up front) that fits in memory."""
    by_epochs = method.client.trains_local_epochs
    if by_epochs and cfg.local_epochs == 0 and cfg.local_steps == 0:
        raise ConfigError(
            "run-config keys 'local-epochs' = 0 and 'local-steps' = 0: clients would not train; "
            "expected local-epochs >= 1 or local-steps >= 1"
        )
    n = max(s.train for s in sizes)
    per_batch = BYTES_PER_BATCH + 8 * min(cfg.batch_size, n)
    if cfg.local_steps > 0:
        most = MAX_DRAWN_BYTES // per_batch
        if cfg.local_steps > most:
            raise ConfigError(
                f"run-config key 'local-steps' = {cfg.local_steps} is not allowed: each step's minibatch is drawn before "
                f"training ({per_batch} bytes each at batch-size {cfg.batch_size}); expected at most {most}"
            )
        return
    epochs = cfg.local_epochs if by_epochs else 1
    batches = epochs * math.ceil(n / cfg.batch_size)
    drawn = batches * BYTES_PER_BATCH + epochs * n * 8
    if drawn > MAX_DRAWN_BYTES:
        most = MAX_DRAWN_BYTES // (math.ceil(n / cfg.batch_size) * BYTES_PER_BATCH + n * 8)
        raise ConfigError(
            f"run-config key 'local-epochs' = {cfg.local_epochs} is not allowed: the largest partition ({n} samples) "
            f"draws {drawn / 2**20:.0f} MiB of minibatch order before training; expected at most {most}"
        )


def parameter_count(cfg: RunConfig, ds: Dataset) -> int:
    """Entries of every tensor the model holds (parameters and buffers), built without memory."""
    from fedapp.models import build_model

    with torch.device("meta"):
        model = build_model(cfg, ds.in_shape, ds.num_classes)
    return sum(t.numel() for t in model.state_dict().values())


def check_model_size(cfg: RunConfig, ds: Dataset) -> None:
    count = parameter_count(cfg, ds)
    if count > MAX_PARAMETERS:
        what = f"'mlp-hidden' = {cfg.mlp_hidden!r}" if cfg.model == "mlp" else f"'model' = {cfg.model!r}"
        raise ConfigError(
            f"run-config key {what} is not allowed: the model would hold {count:,} parameters for dataset {cfg.dataset!r} "
            f"(input {ds.in_shape}); expected at most {MAX_PARAMETERS:,}"
        )


def check_local_tests(cfg: RunConfig, method: Method, sizes: tuple[SplitSize, ...]) -> None:
    """A personalised evaluation needs every client to hold a local test split."""
    if not (method.server.personalized_eval or cfg.personalized_eval):
        return
    empty = [pid for pid, s in enumerate(sizes) if s.test == 0]
    if empty:
        why = f"method {cfg.method!r} evaluates" if method.server.personalized_eval else "personalized-eval = true evaluates"
        raise ConfigError(
            f"run-config key 'local-test-fraction' = {cfg.local_test_fraction}: {why} every client on its local test split, "
            f"but client(s) {empty[:10]} have none (partition = {cfg.partition!r}); expected local-test-fraction > 0 "
            "(partition = 'shard': samples-per-client > 0 or local-test-source = 'test-set')"
        )


def unused_keys(raw: Mapping[str, Any], cfg: RunConfig, method: Method) -> list[str]:
    """Warnings for keys set away from their default that ``method`` never reads.

    A warning, not an error: sweeps rerun one config file with another ``method`` (a
    baseline), and a key the method never reads cannot change what the run does."""
    own = set(fields_of(method.params)) if method.params is not None else set()
    owners: dict[str, list[str]] = {}
    for name in MODULES:
        other = get_method(name).params
        if name != method.name and other is not None:
            for key in set(fields_of(other)) - own:
                owners.setdefault(key, []).append(name)
    if not uses_prox(cfg):
        owners["proximal-mu"] = ["fedprox", "base = 'fedprox'"]
    defaults: dict[str, Any] = {}
    for cls in (RunConfig, *(get_method(m).params for m in MODULES)):
        defaults.update(defaults_of(cls) if cls is not None else {})
    out = []
    for key in sorted(owners):
        if key not in raw:
            continue
        try:
            value = coerce(key, raw[key], defaults[key])
        except ConfigError:
            value = raw[key]
        if value != defaults[key]:
            out.append(
                f"run-config key '{key}' = {raw[key]!r} is not used by method {cfg.method!r} (used by {', '.join(owners[key])}); ignored"
            )
    return out
