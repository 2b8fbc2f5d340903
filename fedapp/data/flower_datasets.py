"""Flower Datasets' partitioners without the cost of the package's ``__init__``.

``import flwr_datasets.partitioner`` first runs ``flwr_datasets/__init__.py``, which also
imports its metrics and visualization modules (matplotlib, seaborn, scipy): ~2 s more per
process, paid by the server and by every simulation worker before its first round. A
run needs only the partitioners, so the package is registered here with its
``__init__`` deferred: submodules import as usual, and the first use of an attribute
of the package itself (``flwr_datasets.FederatedDataset``, ``__version__``) runs the
real ``__init__`` in place, so nothing else sees a difference.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any


def defer_package_init() -> None:
    """Register ``flwr_datasets`` with its ``__init__`` deferred (no-op once it is imported)."""
    if "flwr_datasets" in sys.modules:
        return
    spec = importlib.util.find_spec("flwr_datasets")
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError("flwr-datasets is not installed", name="flwr_datasets")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def __getattr__(name: str) -> Any:  # PEP 562: only for names the package does not have yet
        del module.__getattr__
        loader.exec_module(module)
        return getattr(module, name)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules["flwr_datasets"] = module


def partitioner_module() -> ModuleType:
    """``flwr_datasets.partitioner``, imported with the package ``__init__`` deferred."""
    defer_package_init()
    import flwr_datasets.partitioner

    return flwr_datasets.partitioner
