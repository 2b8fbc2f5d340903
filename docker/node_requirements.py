"""Print the app's dependencies for a device image whose base already provides CUDA torch.

torch is left out (the base image's build must stay) and torchvision is pinned to the release
made for that torch (torch 2.N pairs with torchvision 0.(N+15): 2.6 with 0.21, 2.14 with 0.29),
so pip can neither pull another torch in through torchvision nor pick a torchvision built for
another torch. Of the optional extras only ``medmnist`` comes along (a board may train on
those sets); no Ray, no reports on a device.

    python docker/node_requirements.py pyproject.toml 2.6.0   # torch version of the base image
"""

import re
import sys
import tomllib


def matching_torchvision(torch_version: str) -> str:
    """``torchvision==0.M.*`` for torch ``2.N[.P][+local]``."""
    found = re.match(r"2\.(\d+)(?:\.|$|\+|a|rc)", torch_version)
    if found is None:
        raise SystemExit(f"torch {torch_version!r}: expected a torch 2.x version (the base image's)")
    return f"torchvision==0.{int(found.group(1)) + 15}.*"


def main(argv: list[str]) -> None:
    with open(argv[0] if argv else "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    deps, extras = project["dependencies"], project["optional-dependencies"]
    for dep in [*deps, *extras["medmnist"]]:
        name = re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0].lower()
        if name == "torch":
            continue
        if name == "torchvision":
            print(matching_torchvision(argv[1]) if len(argv) > 1 else "torchvision")
        else:
            print(re.sub(r"^flwr\[simulation\]", "flwr", dep))


if __name__ == "__main__":
    main(sys.argv[1:])
