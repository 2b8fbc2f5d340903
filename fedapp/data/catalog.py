"""Every file-backed dataset by name: its sources (for fetch/check), its loader and its
default normalisation/augmentation ("auto"; docs/datasets.md says why each was chosen).

Names are known without importing torchvision (slow to import); sources are built on
first use.
"""

from __future__ import annotations

from functools import cache

from fedapp.data import medmnist, vision
from fedapp.data.dataset import Dataset
from fedapp.data.mixed import Part, mixed
from fedapp.data.source import Source

# name -> (default normalisation, default augmentation)
VISION_DEFAULTS: dict[str, tuple[str, str]] = {
    "mnist": ("none", "none"),
    **{("emnist" if s == "byclass" else f"emnist-{s}"): ("none", "none") for s in vision.EMNIST_SPLITS},
    "cifar10": ("half", "none"),
    "cifar100": ("cifar100", "flip-rotate-crop"),
}
MEDMNIST_DEFAULTS = ("half", "none")

# dataset -> (source name, source id) per part, in label order; source id = the client under partition = "source"
MIXED: dict[str, list[tuple[str, int]]] = {
    "cifar-mnist": [("cifar10", 1), ("mnist", 0)],
    "path-oct-tissue": [("pathmnist", 0), ("octmnist", 1), ("tissuemnist", 2)],
}


def source_names() -> list[str]:
    return [*VISION_DEFAULTS, *medmnist.names()]


def dataset_names() -> list[str]:
    return [*source_names(), *MIXED]


@cache
def source(name: str) -> Source:
    if name == "mnist":
        return vision.mnist_source()
    if name.startswith("emnist"):
        return vision.emnist_source(name.partition("-")[2] or "byclass")
    if name in ("cifar10", "cifar100"):
        return vision.cifar_source(int(name[5:]))
    return medmnist.source(name)


def sources_for(dataset: str) -> list[Source]:
    """The sources a dataset reads (one, or several for a mixed set)."""
    if dataset in MIXED:
        return [source(n) for n, _ in MIXED[dataset]]
    return [source(dataset)]


def load(name: str, seed: int, root: str) -> Dataset:
    if name in MIXED:
        return mixed(name, [Part(source(n), g) for n, g in MIXED[name]], seed, root)
    if name not in VISION_DEFAULTS:
        medmnist.check_single_label(name)
    src = source(name)
    norm, aug = VISION_DEFAULTS.get(name, MEDMNIST_DEFAULTS)
    x_tr, y_tr, x_te, y_te = src.load(root, name)
    return Dataset(name, x_tr, y_tr, x_te, y_te, src.num_classes, default_normalize=norm, default_augment=aug)
