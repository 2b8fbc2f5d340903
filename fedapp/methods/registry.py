"""Method registry: name -> the module whose ``METHOD`` (methods/base.py ``Method``) holds its server
policy, client policy and hyperparameter dataclass. Modules load on first use: resolving a
run-config imports the method it names (and torch only through it); the other methods load only
where the run-config holds a key that is neither a base key nor that method's own (to tell another
method's key from a misspelt one), as a full Flower run-config with every default does."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fedapp.core.config import AUTO_LOCAL_TEST, PERSONAL_LOCAL_TEST, ConfigError, RunConfig, check_known, fields_of, parse
from fedapp.models.registry import check_model

if TYPE_CHECKING:  # importing base would load torch: resolving a config stays light
    from fedapp.methods.base import Method

# name -> module holding METHOD. A new method is one file plus one line here; a new run-config key
# of it also gets its default in pyproject's [tool.flwr.app.config] (tests/test_keys.py names a missing one).
MODULES: dict[str, str] = {
    "fedavg": "fedapp.methods.fedavg",
    "fedprox": "fedapp.methods.fedprox",
    "fedselect": "fedapp.methods.fedselect",
    "local": "fedapp.methods.local",
    "fedavg-ft": "fedapp.methods.fedavg_ft",
    "fedper": "fedapp.methods.fedper",
    "fedbn": "fedapp.methods.fedbn",
    "fedpart": "fedapp.methods.fedpart",
    "fedspu": "fedapp.methods.fedspu",
    "fjord": "fedapp.methods.fjord",
    "feddrop": "fedapp.methods.feddrop",
    "fedpews": "fedapp.methods.fedpews",
    "fedpews-fixed": "fedapp.methods.fedpews_fixed",
}


def get_method(name: str) -> Method:
    if name not in MODULES:
        raise ConfigError(f"run-config key 'method' = {name!r} is not allowed: expected one of {', '.join(MODULES)}")
    method: Method = importlib.import_module(MODULES[name]).METHOD
    return method


def all_param_classes() -> list[type]:
    classes: list[type] = [RunConfig]
    for name in MODULES:
        p = get_method(name).params
        if p is not None and p not in classes:
            classes.append(p)
    return classes


def known_keys() -> set[str]:
    return {k for cls in all_param_classes() for k in fields_of(cls)}


def allowed_keys(raw: Mapping[str, Any]) -> set[str]:
    """The keys ``raw`` may hold: the base and its method's alone where that covers them (no other
    method module is imported), else every method's (so an unknown key's error lists them all)."""
    name = raw.get("method", fields_of(RunConfig)["method"].default)
    if isinstance(name, str) and name in MODULES:
        params = get_method(name).params
        own = set(fields_of(RunConfig)) | (set(fields_of(params)) if params is not None else set())
        if set(raw) <= own:
            return own
    return known_keys()


def resolve(raw: Mapping[str, Any]) -> tuple[RunConfig, Method, Any]:
    """Validate a flat run-config: base keys, the method's keys, no unknown keys."""
    check_known(raw, allowed_keys(raw))
    cfg = parse(RunConfig, raw)
    check_model(cfg.model)
    method = get_method(cfg.method)
    params = parse(method.params, raw) if method.params is not None else None
    return with_local_test_default(cfg, method), method, params


def with_local_test_default(cfg: RunConfig, method: Method) -> RunConfig:
    """``local-test-fraction = -1`` (the default): a quarter of each client's data where
    clients are evaluated on their local test split (every personalised method, or
    ``personalized-eval``), none otherwise, so FedAvg-style runs keep all data for training."""
    if cfg.local_test_fraction != AUTO_LOCAL_TEST:
        return cfg
    personal = method.server.personalized_eval or cfg.personalized_eval
    return dataclasses.replace(cfg, local_test_fraction=PERSONAL_LOCAL_TEST if personal else 0.0)
