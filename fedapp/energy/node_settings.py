"""Where a node's meter commands and sensor paths come from: the node itself, never a run.

The run-config is written by whoever submits a run and reaches every node unsigned, so
nothing a node executes or reads as a device file may come from it. The tegrastats command
and the sysfs root are the node's own settings: its ``--node-config`` (``fedapp deploy
supernode --energy-tegrastats/--energy-sysfs-root``), else its environment
(``FEDAPP_ENERGY_TEGRASTATS``/``FEDAPP_ENERGY_SYSFS_ROOT``), else the defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from fedapp.core.config import ConfigError

NODE_SETTINGS = {  # node-config key: (environment variable, default)
    "energy-sysfs-root": ("FEDAPP_ENERGY_SYSFS_ROOT", "/sys"),
    "energy-tegrastats": ("FEDAPP_ENERGY_TEGRASTATS", "tegrastats"),
}


def node_setting(key: str, node_config: Mapping[str, Any]) -> str:
    env, default = NODE_SETTINGS[key]
    value = node_config.get(key)
    if value is None or value == "":
        return os.environ.get(env) or default
    if not isinstance(value, str):
        raise ConfigError(f"node-config key '{key}' = {value!r} is not allowed: expected a string")
    return value
