"""Declared dependency ranges admit the torch builds fedapp runs on, and the lock sits inside them;
each end of the flwr, torch and torchvision ranges is a release a leg ran the suite on."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def declared() -> dict[str, Requirement]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {(r := Requirement(d)).name: r for d in deps}


def locked() -> dict[str, str]:
    lines = (ROOT / "requirements-lock.txt").read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))


# scripts/test-newest.sh's leg as docs/results.md records it ("Foundation: the newest Flower and torch")
NEWEST = {"flwr": "1.42.0", "torch": "2.15.0", "torchvision": "0.29.2"}
OLDEST = {"flwr": "1.41.0", "torch": "2.6.0", "torchvision": "0.21.0"}  # the lock's flwr; scripts/test-oldest-torch.sh's torch


@pytest.mark.parametrize(
    ("torch", "vision"), [("2.6.0", "0.21.0"), ("2.11.0", "0.26.0"), ("2.14.1", "0.29.1"), ("2.15.0", "0.29.2")]
)  # Jetson; GPU; CI; newest
def test_ranges_admit_the_gpu_images_and_ci_torch(torch: str, vision: str) -> None:
    deps = declared()
    assert deps["torch"].specifier.contains(torch) and deps["torchvision"].specifier.contains(vision)
    assert len(deps["torch"].specifier) == 2  # a range with an upper bound, not an exact pin


def test_the_lower_bounds_are_the_oldest_tested_torch() -> None:
    """scripts/test-oldest-torch.sh tests 2.6.0 + 0.21.0: nothing older is declared."""
    deps = declared()
    assert not deps["torch"].specifier.contains("2.5.1") and not deps["torchvision"].specifier.contains("0.20.1")
    script = (ROOT / "scripts" / "test-oldest-torch.sh").read_text()
    assert "TORCH=2.6.0 VISION=0.21.0" in script


def test_each_end_of_the_flwr_and_torch_ranges_is_a_tested_release() -> None:
    """Every release in the range lies between two measured ones: the next minor release above the
    newest leg's and the release below the oldest are outside."""
    deps = declared()
    above = {"flwr": "1.43.0", "torch": "2.16.0", "torchvision": "0.30.0"}
    below = {"flwr": "1.40.0", "torch": "2.5.1", "torchvision": "0.20.1"}
    for name in NEWEST:
        spec = deps[name].specifier
        assert spec.contains(NEWEST[name]) and spec.contains(OLDEST[name]), name
        assert not spec.contains(above[name]) and not spec.contains(below[name]), (name, str(spec))
    extra = Requirement(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["simulation"][0])
    assert extra.specifier == deps["flwr"].specifier  # the simulation extra takes the same Flower
    results = (ROOT / "docs" / "results.md").read_text().split("## Foundation: the newest Flower and torch")[1].split("\n## ")[0]
    assert all(f"{name} {version}" in results for name, version in NEWEST.items())


def test_lock_pins_every_package_of_the_extras_ci_installs() -> None:
    lock = {k.lower().replace("_", "-"): v for k, v in locked().items()}
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("simulation", "report", "medmnist", "tensorboard"):
        for dep in extras[extra]:
            req = Requirement(dep)
            name = "ray" if req.name == "flwr" else req.name  # flwr[simulation] brings Ray
            assert name in lock and (name == "ray" or req.specifier.contains(lock[name])), (extra, dep)


def test_lock_pins_every_declared_dependency_inside_its_range() -> None:
    lock = {k.lower().replace("_", "-"): v for k, v in locked().items()}
    for name, req in declared().items():
        assert name in lock, name
        assert req.specifier.contains(lock[name]), (name, lock[name], str(req.specifier))
