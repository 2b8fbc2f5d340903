"""One run-config value as TOML text: what `flwr run --run-config` and a run-config file read
back as the same value (`fedapp sim` writes them; provenance records the command)."""

from __future__ import annotations

import json
import math
from typing import Any


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
    return json.dumps(str(v))  # a TOML basic string: JSON's escapes are valid TOML escapes
