"""fedapp: partial-network federated learning methods on Flower.

``fedapp.load_model(run_dir)`` and ``fedapp.load_client_model(run_dir, partition)`` give a
finished run's models back as torch modules (fedapp.load); imported on first use, so
``import fedapp`` stays light."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_client_model", "load_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fedapp import load

        return getattr(load, name)
    raise AttributeError(f"module 'fedapp' has no attribute {name!r}")
