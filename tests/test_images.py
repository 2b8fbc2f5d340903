"""Images. Without an arm64 machine the Jetson image cannot be built here; what can be checked
is whether its default base image's torch is one the app declares it runs on. The amd64
images built by scripts/images.sh (slow, needs buildah and the built images): each one's
root filesystem, mounted, runs `fedapp --help` in a chroot.
  scripts/images.sh --make-base --torch-index https://pypi.org/simple
  pytest -n 0 -q -m slow tests/test_images.py
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
TAG = "0.1.0"


def app_requirement(name: str) -> Requirement:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(r for r in map(Requirement, deps) if r.name == name)


def jetson_base_torch() -> str:
    text = (ROOT / "docker" / "jetson.Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.M)
    assert base is not None, "jetson.Dockerfile has no default BASE_IMAGE"
    tag = re.fullmatch(r"[\w./-]+/pytorch:(\d+\.\d+)(?:\.\d+)?-r\d+[\w.-]*", base[1])
    assert tag is not None, f"cannot read the torch version from the base image tag {base[1]!r}"
    return tag[1]


def test_jetson_default_base_torch_is_within_the_apps_range() -> None:
    torch = jetson_base_torch()
    assert app_requirement("torch").specifier.contains(torch), f"base torch {torch} vs app {app_requirement('torch')}"


def built(image: str) -> bool:
    return shutil.which("buildah") is not None and subprocess.run(["buildah", "inspect", image], capture_output=True).returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("target", ["superlink", "proxy", "supernode"])
def test_built_image_runs_fedapp_help_in_a_chroot(target: str) -> None:
    image = f"fedapp-{target}:{TAG}"
    if not built(image):
        pytest.skip(f"{image} is not built (scripts/images.sh)")
    ctr = subprocess.run(["buildah", "from", image], capture_output=True, text=True, check=True).stdout.strip()
    try:
        rootfs = subprocess.run(["buildah", "mount", ctr], capture_output=True, text=True, check=True).stdout.strip()
        out = subprocess.run(["chroot", rootfs, "fedapp", "--help"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "fleet" in out.stdout and "deploy" in out.stdout
        if target != "supernode":
            nginx = subprocess.run(["chroot", rootfs, "nginx", "-v"], capture_output=True, text=True, timeout=60)
            assert nginx.returncode == 0, nginx.stderr
    finally:
        subprocess.run(["buildah", "umount", ctr], capture_output=True)
        subprocess.run(["buildah", "rm", ctr], capture_output=True)
