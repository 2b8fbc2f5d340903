"""The `flwr` CLI's connection to a deployed SuperLink: a block in ``$FLWR_HOME/config.toml``.

``flwr run . <name>`` and ``flwr supernode register <key.pub> <name>`` dial the address
given here and verify it with ``root-certificates`` (the private CA); other connections in
the file are kept.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from flwr.cli.constant import DEFAULT_FLOWER_CONFIG_TOML

from fedapp.deploy import DeployError


def flwr_home(explicit: str | Path | None = None) -> Path:
    return Path(explicit or os.environ.get("FLWR_HOME") or Path.home() / ".flwr")


def _emit(table: dict[str, Any], prefix: str, out: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    if prefix and (scalars or not table):
        out.append(f"[{prefix}]")
    for k, v in scalars.items():
        out.append(f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}")
    for k, v in table.items():
        if isinstance(v, dict):
            _emit(v, f"{prefix}.{k}" if prefix else k, out)


def to_toml(data: dict[str, Any]) -> str:
    """TOML for nested tables of str/int/float/bool (all config.toml holds)."""
    out: list[str] = []
    _emit(data, "", out)
    return "\n".join(out) + "\n"


def write_connection(name: str, address: str, ca: str | Path | None, home: str | Path | None = None, default: bool = False) -> Path:
    """Add or replace connection ``name``; ``ca`` None writes an insecure (plain HTTP) one. The
    default connection changes only with ``default`` (or where the file names none)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise DeployError(f"connection name {name!r}: use letters, digits, '-' and '_'")
    path = flwr_home(home) / "config.toml"
    # a fresh home starts as Flower's own first config (default: the local simulation), as `flwr` would
    # write it, so that adding a deployment does not make a later plain `flwr run .` go to the boards
    data = tomllib.loads(path.read_text() if path.exists() else DEFAULT_FLOWER_CONFIG_TOML)
    links = data.setdefault("superlink", {})
    block: dict[str, Any] = {"address": address}
    if ca is None:
        block["insecure"] = True
    else:
        ca_path = Path(ca).resolve()
        if not ca_path.is_file():
            raise FileNotFoundError(f"CA certificate {ca_path} does not exist (see `fedapp deploy certs`)")
        block["root-certificates"] = str(ca_path)
    links[name] = block
    if default or "default" not in links:
        links["default"] = name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_toml(data))
    return path
