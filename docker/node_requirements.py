"""Print the app's dependencies for a device image whose base already provides CUDA torch.

torch is left out (the base image's build must stay), torchvision is kept unpinned (pip picks
the release matching the torch pinned by the constraints file), and flwr loses its
``simulation`` extra (Ray is only needed where simulations run, never on a device).
"""

import re
import sys
import tomllib

with open(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml", "rb") as fh:
    deps = tomllib.load(fh)["project"]["dependencies"]
for dep in deps:
    name = re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0].lower()
    if name == "torch":
        continue
    print("torchvision" if name == "torchvision" else re.sub(r"^flwr\[simulation\]", "flwr", dep))
