"""The warm runtime's root (fedapp.deploy.warm_runtime.preload): it keeps third-party modules loaded
but none of the app's own, so each bundle's template imports the bundle's code, never the installed
copy; and it keeps torch's generator state as a fresh interpreter has it, for the processes that load
a bundle themselves. Each check runs in a fresh interpreter: forgetting fedapp's modules here would
break the rest of the session."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys, torch
fresh = torch.get_rng_state()
from fedapp.deploy import warm_fork
from fedapp.deploy.warm_runtime import preload
skipped = preload(["torch", "fedapp.client_app", "fedapp.client.handlers", "no_such_module_here"])
left = sorted(m for m in sys.modules if m.split(".")[0] in ("fedapp", "client_app", "server_app"))
print(json.dumps({"skipped": skipped, "left": left, "handlers_deps": "flwr.clientapp" in sys.modules,
                  "same_rng": bool(torch.equal(warm_fork.FRESH_TORCH_RNG, fresh))}))
"""


def test_preload_keeps_dependencies_forgets_the_app_and_keeps_torch_s_fresh_generator() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["skipped"] == ["no_such_module_here"]
    assert got["left"] == ["fedapp.deploy.warm_fork", "fedapp.deploy.warm_runtime"]  # the runtime itself, nothing a bundle runs
    assert got["handlers_deps"] is True
    assert got["same_rng"] is True
