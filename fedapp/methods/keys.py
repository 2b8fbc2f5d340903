"""`fedapp keys [METHOD]`: every run-config key with its default, what it allows and its doc,
from the registries themselves (RunConfig's fields, each method's params dataclass);
`fedapp keys --toml`: the same defaults as pyproject's run-config block."""

from __future__ import annotations

import json
from collections.abc import Iterable

from fedapp.core import toml_text
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


TOML_HEADER = """\
# Every run-config key with its default, written by `fedapp keys --toml` (tests/test_keys.py checks
# this block equals its output: edit the dataclass, then paste the command's output here).
# Kebab-case, flat; fedapp.core.config and each method's parameter dataclass validate them."""


def toml_block() -> str:
    """pyproject's ``[tool.flwr.app.config]`` block: the common keys, then each method family's
    own keys once, under a comment naming the methods that read them."""
    lines = [TOML_HEADER, "[tool.flwr.app.config]"]
    written: set[str] = set()
    for cls in [RunConfig, *dict.fromkeys(p for m in MODULES if (p := get_method(m).params) is not None)]:
        new = {k: f for k, f in fields_of(cls).items() if k not in written}
        if not new:
            continue
        if cls is not RunConfig:
            users = [m for m in MODULES if (p := get_method(m).params) is not None and set(new) & set(fields_of(p))]
            lines.append(f"# {', '.join(users)} ({cls.__name__})")
        lines += [f"{k} = {toml_text.toml_value(f.default)}" for k, f in new.items()]
        written |= set(new)
    return "\n".join(lines)
