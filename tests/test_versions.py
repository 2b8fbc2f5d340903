"""Declared dependency ranges admit the torch builds fedapp runs on, and the lock sits inside them."""

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


@pytest.mark.parametrize(("torch", "vision"), [("2.11.0", "0.26.0"), ("2.14.1", "0.29.1")])  # GPU images; CI
def test_ranges_admit_the_gpu_images_and_ci_torch(torch: str, vision: str) -> None:
    deps = declared()
    assert deps["torch"].specifier.contains(torch) and deps["torchvision"].specifier.contains(vision)
    assert len(deps["torch"].specifier) == 2  # a range with an upper bound, not an exact pin


def test_lock_pins_every_declared_dependency_inside_its_range() -> None:
    lock = {k.lower().replace("_", "-"): v for k, v in locked().items()}
    for name, req in declared().items():
        assert name in lock, name
        assert req.specifier.contains(lock[name]), (name, lock[name], str(req.specifier))
