"""Installed size of each install profile (README, "Install"), from one environment that holds them all.

Run with the interpreter of a full environment (``.venv/bin/python``): for a profile (the
pyproject's dependencies plus some extras) it walks the requirement graph of the installed
distributions (markers evaluated, extras followed) and adds up the bytes on disk of the files each
reached distribution's RECORD lists. So the numbers for the lighter installs need no extra
download, and the sum for the full profile can be checked against ``du`` of the environment.

    .venv/bin/python bench/install_sizes.py pyproject.toml
    .venv/bin/python bench/install_sizes.py <(git show HEAD~5:pyproject.toml) --only full   # before

``--provided torch,torchvision``: packages a board brings itself (not counted, not followed).
Profile ``cpu`` counts torch without its CUDA libraries and without the CUDA wheels it pulls
(nvidia-*, triton, cuda-*): what the PyTorch CPU index's torch leaves out, as an estimate (the CPU
wheel is not measured here).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CUDA_WHEEL = re.compile(r"^(nvidia-.*|triton|cuda-.*)$")
CUDA_LIB = re.compile(r"^torch/lib/lib(torch_cuda.*|c10_cuda|torch_nvshmem|caffe2_nvrtc)\.so")


def dists() -> dict[str, md.Distribution]:
    return {canonicalize_name(d.metadata["Name"]): d for d in md.distributions()}


def size_of(dist: md.Distribution, cpu: bool) -> int:
    total = 0
    for f in dist.files or []:
        if cpu and CUDA_LIB.match(str(f)):
            continue
        p = Path(str(dist.locate_file(f)))
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def closure(reqs: list[str], extras_of: dict[str, list[str]], found: dict[str, md.Distribution], skip: set[str], cpu: bool) -> set[str]:
    """Names of the installed distributions ``reqs`` reach (``fedapp[x]`` expands the pyproject's extra x)."""
    seen: set[str] = set()
    todo = [(r, "") for r in reqs]
    while todo:
        text, extra = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name == "fedapp":
            todo += [(r, "") for e in req.extras for r in extras_of[e]]
            continue
        if name in skip or (cpu and CUDA_WHEEL.match(name)):
            continue
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        if name not in found:
            print(f"  (not installed here: {name})", file=sys.stderr)
            continue
        requires = found[name].requires or []
        todo += [(r, "") for r in requires]
        todo += [(r, e) for e in req.extras for r in requires]
    return {k.split("[")[0] for k in seen} & set(found)


PROFILES = {  # name -> (extras, provided packages, CPU torch)
    "cpu-simulation": (["simulation", "report"], set(), True),
    "board": ([], {"torch", "torchvision"}, False),
    "core": ([], set(), False),
    "cpu-core": ([], set(), True),
    "full": (["dev"], set(), False),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pyproject")
    ap.add_argument("--only", action="append", choices=sorted(PROFILES))
    ap.add_argument("--all", action="store_true", help="also every installed distribution (compare with du -sm of the environment)")
    args = ap.parse_args()
    project = tomllib.loads(Path(args.pyproject).read_text())["project"]
    extras_of = project.get("optional-dependencies", {})
    found = dists()
    if args.all:
        print(f"{'installed':15s} {sum(size_of(d, False) for d in found.values()) / 2**20:8.0f} MB  {len(found):3d} distributions")
    for name in args.only or PROFILES:
        extras, provided, cpu = PROFILES[name]
        if any(e not in extras_of for e in extras):
            print(f"{name:15s} (this pyproject has no extra {extras})")
            continue
        reqs = [*project["dependencies"], *(r for e in extras for r in extras_of[e])]
        names = closure(reqs, extras_of, found, provided, cpu)
        mb = sum(size_of(found[n], cpu and n == "torch") for n in names) / 2**20
        big = sorted(names, key=lambda n: -size_of(found[n], cpu and n == "torch"))[:4]
        print(f"{name:15s} {mb:8.0f} MB  {len(names):3d} distributions; largest: {', '.join(big)}")


if __name__ == "__main__":
    main()
