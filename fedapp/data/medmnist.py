"""MedMNIST v2 2D sets through the medmnist package (its dataset classes read the file).

A set is named by its medmnist flag, with the image size appended for the larger
releases: ``pathmnist`` reads ``<data-root>/pathmnist.npz`` (28x28), ``pathmnist-64``
reads ``pathmnist_64.npz``; sizes are those medmnist offers (28, 64, 128, 224). The
official train and test splits are used; ``val`` is not read. Multi-label sets
(ChestMNIST) cannot train with single-label cross-entropy and are refused by name.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.core.config import ConfigError
from fedapp.core.extras import require
from fedapp.data.errors import BadFile, describe
from fedapp.data.source import Arrays, Source

SIZES = (28, 64, 128, 224)
# medmnist's 2D flags in its INFO order (tests/test_extras.py checks them against the package), so that
# the dataset names are known where the optional medmnist package is not installed
FLAGS = (
    "pathmnist", "chestmnist", "dermamnist", "octmnist", "pneumoniamnist", "retinamnist", "breastmnist", "bloodmnist",
    "tissuemnist", "organamnist", "organcmnist", "organsmnist",
)  # fmt: skip


@cache
def info() -> dict[str, dict[str, Any]]:
    """medmnist's INFO, 2D sets only. Read from medmnist/info.py alone: the package's
    ``__init__`` imports torch and scikit-learn (~3 s), and every process that imports
    fedapp.data needs these names."""
    loaded = sys.modules.get("medmnist.info")
    if loaded is None:
        require("medmnist", "a MedMNIST dataset")
        package = importlib.util.find_spec("medmnist")  # finds the package without running it
        if package is None or package.origin is None:
            raise ModuleNotFoundError("medmnist is not installed")
        spec = importlib.util.spec_from_file_location("fedapp_medmnist_info", Path(package.origin).with_name("info.py"))
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
    return {flag: v for flag, v in loaded.INFO.items() if not v["python_class"].endswith("3D")}


def names() -> list[str]:
    """Every MedMNIST 2D set name, known without the medmnist package (a board may lack it)."""
    return [flag if size == 28 else f"{flag}-{size}" for flag in FLAGS for size in SIZES]


def split_name(name: str) -> tuple[str, int]:
    flag, _, size = name.partition("-")
    return flag, int(size) if size else 28


def npz_name(flag: str, size: int) -> str:
    return f"{flag}.npz" if size == 28 else f"{flag}_{size}.npz"


def _split(cls: Any, base: Path, rel: str, split: str, size: int, multi_label: bool) -> tuple[np.ndarray, np.ndarray]:
    try:
        ds = cls(split=split, root=str(base), size=size)
        x, y = np.asarray(ds.imgs), np.asarray(ds.labels)
    except Exception as err:
        raise BadFile(rel, f"medmnist could not read its {split} split: {describe(err)}") from err
    if x.dtype != np.uint8 or x.ndim not in (3, 4) or x.shape[1:3] != (size, size) or (x.ndim == 4 and x.shape[3] != 3):
        raise BadFile(rel, f"{split}_images is {x.dtype} {x.shape}; expected uint8 (N, {size}, {size}) or (N, {size}, {size}, 3)")
    if y.ndim != 2 or len(y) != len(x):
        raise BadFile(rel, f"{split}_labels has shape {y.shape} for {len(x)} images; expected ({len(x)}, L)")
    if y.shape[1] != 1 and not multi_label:
        raise BadFile(rel, f"{split}_labels has {y.shape[1]} labels per image; this set has one")
    x = x[:, None] if x.ndim == 3 else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x, (y[:, 0] if y.shape[1] == 1 else y).astype(np.int64)  # multi-label sets are only read by `data check`


def source(name: str) -> Source:
    require("medmnist", f"run-config key 'dataset' = {name!r}")
    flag, size = split_name(name)
    meta = info()[flag]
    rel = npz_name(flag, size)
    suffix = "" if size == 28 else f"_{size}"

    def dataset_class() -> Any:
        import medmnist  # with torch and scikit-learn: only when a file is read or fetched

        return getattr(medmnist, meta["python_class"])

    def read(base: Path) -> Arrays:
        multi = "multi-label" in meta["task"]
        cls = dataset_class()
        return (*_split(cls, base, rel, "train", size, multi), *_split(cls, base, rel, "test", size, multi))

    def download(base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        dataset_class()(split="train", root=str(base), size=size, download=True)

    return Source(name, (rel,), read, download, num_classes=len(meta["label"]), md5={rel: meta[f"MD5{suffix}"]}, url=meta[f"url{suffix}"])


def check_single_label(name: str) -> None:
    require("medmnist", f"run-config key 'dataset' = {name!r}")
    flag, _ = split_name(name)
    if "multi-label" in info()[flag]["task"]:
        raise ConfigError(
            f"run-config key 'dataset' = {name!r} is not allowed: {flag} is multi-label ({len(info()[flag]['label'])} binary labels "
            "per image) and fedapp trains single-label classifiers; choose another MedMNIST set"
        )
