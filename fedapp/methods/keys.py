"""`fedapp keys [METHOD]`: every run-config key with its default, what it allows and its doc,
from the registries themselves (RunConfig's fields, each method's params dataclass)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

from fedapp.core.config import RunConfig, allowed_of, fields_of
from fedapp.methods.registry import MODULES, get_method
from fedapp.models.registry import MODELS

# keys whose allowed values are a registry's names (config.py imports neither registry)
NAMED: dict[str, Iterable[str]] = {"method": MODULES, "model": MODELS}


def toml_value(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else json.dumps(v) if isinstance(v, str) else str(v)


def section(title: str, cls: type) -> list[str]:
    lines = [title]
    for name, f in fields_of(cls).items():
        allowed = f"one of {', '.join(NAMED[name])}" if cls is RunConfig and name in NAMED else allowed_of(f)
        lines.append(f"  {name} = {toml_value(f.default)}    [{allowed}]")
        doc = f.metadata.get("doc", "")
        if doc:
            lines.append(f"      {doc}")
    return lines


def keys_text(method: str | None = None) -> str:
    """The common keys, then the keys of ``method`` (every method's when None), grouped."""
    lines = section("common keys (every method)", RunConfig)
    users: dict[type, list[str]] = {}
    for name in [method] if method is not None else list(MODULES):
        params = get_method(name).params
        if params is None:
            if method is not None:
                lines += ["", f"{name} keys: none beyond the common keys"]
            continue
        users.setdefault(params, []).append(name)
    for params, names in users.items():
        lines += ["", *section(f"{', '.join(names)} keys ({params.__name__})", params)]
    return "\n".join(lines)


def check_declared(declared: dict[str, object]) -> list[str]:
    """What differs between a declared key -> default table (pyproject's run-config) and the
    registries: missing keys, stale keys, wrong defaults (empty when they agree)."""
    expected: dict[str, object] = {}
    for cls in [RunConfig, *{get_method(m).params for m in MODULES} - {None}]:
        assert cls is not None and dataclasses.is_dataclass(cls)
        expected.update({k: f.default for k, f in fields_of(cls).items()})
    problems = [f"missing key {k} (default {toml_value(v)})" for k, v in expected.items() if k not in declared]
    problems += [f"stale key {k} (no method declares it)" for k in declared if k not in expected]
    problems += [
        f"key {k}: declared {toml_value(declared[k])}, registry default {toml_value(v)}"
        for k, v in expected.items()
        if k in declared and (declared[k] != v or type(declared[k]) is not type(v))
    ]
    return problems
