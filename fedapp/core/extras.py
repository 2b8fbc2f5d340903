"""Optional dependencies: each comes with an extra of pyproject.toml, so that a board or a
simulation-only machine installs only what it uses. A feature whose package is missing stops
with one line naming the extra that brings it (README, "Install"), before any work starts."""

from __future__ import annotations

from importlib.util import find_spec

from fedapp.core.config import ConfigError

# module -> the extra (pyproject.toml [project.optional-dependencies]) that installs it
EXTRA_OF = {"ray": "simulation", "matplotlib": "report", "medmnist": "medmnist", "tensorboard": "tensorboard", "mlflow": "mlflow"}


class MissingExtra(ConfigError):
    """An optional package a requested feature needs is not installed."""


def require(module: str, feature: str) -> None:
    """Raise MissingExtra where ``module`` cannot be imported (looked up, not imported: no cost)."""
    if find_spec(module) is None:
        extra = EXTRA_OF[module]
        raise MissingExtra(
            f"{feature} needs the package '{module}', which is not installed: pip install 'fedapp[{extra}]' "
            f"(in a checkout: pip install -e '.[{extra}]')"
        )
