"""MNIST, EMNIST, CIFAR-10 and CIFAR-100 in the files torchvision downloads.

Files sit where torchvision puts them under data-root: ``MNIST/raw/*-ubyte``,
``EMNIST/raw/emnist-<split>-*-ubyte``, ``cifar-10-batches-py/``, ``cifar-100-python/``.
MNIST and EMNIST are read by torchvision's own classes (IDX files hold no code). The
CIFAR batches are pickles, which torchvision unpickles with ``pickle.load``: a crafted
file under a data-root someone else can write would run code, so they are read here,
in torchvision's layout, by a restricted unpickler (``cifar_pickle``) that refuses
anything but plain data. Files whose MD5 differs from the official release (re-pickled
copies, the tests' generated fixtures) load with a warning, and `fedapp data check`
reports them. Unparseable or refused files raise an error naming the file.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.data import cifar_pickle
from fedapp.data.errors import BadFile, describe
from fedapp.data.source import Arrays, Source

log = logging.getLogger("fedapp")

EMNIST_SPLITS = ("byclass", "bymerge", "balanced", "letters", "digits", "mnist")


def _tv() -> Any:
    import torchvision.datasets as tvd

    return tvd


# ---------------------------------------------------------------- MNIST / EMNIST (IDX files)


def _idx_pair(base: Path, make: Any, images: str, labels: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one split through a torchvision MNIST-family class; name the bad file on failure."""
    from torchvision.datasets.mnist import read_image_file, read_label_file

    try:
        ds = make()
        x, y = ds.data.numpy(), ds.targets.numpy().astype(np.int64)
    except Exception as err:
        for rel, reader in ((images, read_image_file), (labels, read_label_file)):
            try:
                reader(str(base / rel))
            except Exception as bad:
                raise BadFile(rel, f"not a valid IDX file: {describe(bad)}") from bad
        raise BadFile(images, describe(err)) from err
    if len(x) != len(y):
        raise BadFile(labels, f"{len(y)} labels for the {len(x)} images in {images}")
    return x[:, None], y


def _mnist_family(base: Path, cls_name: str, files: tuple[str, ...], **kw: Any) -> Arrays:
    cls = getattr(_tv(), cls_name)
    x_tr, y_tr = _idx_pair(base, lambda: cls(str(base), train=True, download=False, **kw), files[0], files[1])
    x_te, y_te = _idx_pair(base, lambda: cls(str(base), train=False, download=False, **kw), files[2], files[3])
    return x_tr, y_tr, x_te, y_te


def mnist_source() -> Source:
    files = tuple(f"MNIST/raw/{s}-{k}" for s in ("train", "t10k") for k in ("images-idx3-ubyte", "labels-idx1-ubyte"))
    return Source(
        "mnist",
        files,
        read=lambda base: _mnist_family(base, "MNIST", files),
        download=lambda base: _tv().MNIST(str(base), train=True, download=True),
        num_classes=10,
        url=f"{_tv().MNIST.mirrors[0]}{{train,t10k}}-{{images-idx3,labels-idx1}}-ubyte.gz (gunzip into MNIST/raw/)",
    )


def emnist_source(split: str) -> Source:
    files = tuple(f"EMNIST/raw/emnist-{split}-{s}-{k}" for s in ("train", "test") for k in ("images-idx3-ubyte", "labels-idx1-ubyte"))
    classes = len(_tv().EMNIST.classes_split_dict[split])
    return Source(
        "emnist" if split == "byclass" else f"emnist-{split}",
        files,
        read=lambda base: _mnist_family(base, "EMNIST", files, split=split),
        download=lambda base: _tv().EMNIST(str(base), split=split, train=True, download=True),
        num_classes=classes,
        url=_tv().EMNIST.url + " (unzip gzip/*.gz into EMNIST/raw/)",
    )


# ---------------------------------------------------------------- CIFAR (python pickles)


def _batch(base: Path, rel: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR batch: its uint8 (N, 3072) images and N labels ('labels', or 'fine_labels' in CIFAR-100)."""
    entry = cifar_pickle.load(base, rel)
    if not isinstance(entry, dict) or "data" not in entry or not ({"labels", "fine_labels"} & set(entry)):
        raise BadFile(rel, "not a CIFAR batch (needs keys 'data' and 'labels'/'fine_labels')")
    data = entry["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        what = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise BadFile(rel, f"'data' is {what}; expected uint8 (N, 3072)")
    try:
        labels = np.asarray(entry["labels" if "labels" in entry else "fine_labels"], dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as err:
        raise BadFile(rel, f"labels are not integers: {describe(err)}") from err
    if labels.shape != (len(data),):
        raise BadFile(rel, f"labels of shape {labels.shape} for {len(data)} images")
    return data, labels


def _cifar_split(base: Path, files: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The batches of one split in torchvision's order, images as (N, 3, 32, 32) (torchvision's
    layout before its HWC view), labels as int64."""
    batches = [_batch(base, f) for f in files]
    return np.vstack([x for x, _ in batches]).reshape(-1, 3, 32, 32), np.concatenate([y for _, y in batches])


def _check_meta(base: Path, rel: str, key: str) -> None:
    """torchvision reads the label names from the meta file: it must hold them."""
    meta = cifar_pickle.load(base, rel)
    if not isinstance(meta, dict) or key not in meta:
        raise BadFile(rel, f"not a CIFAR meta file (needs key {key!r})")


def _md5_differs(base: Path, md5: dict[str, str]) -> bool:
    return any(hashlib.md5((base / rel).read_bytes(), usedforsecurity=False).hexdigest() != m for rel, m in md5.items())


def cifar_source(classes: int) -> Source:
    cls = _tv().CIFAR10 if classes == 10 else _tv().CIFAR100
    folder = cls.base_folder
    listed = [*cls.train_list, *cls.test_list, [cls.meta["filename"], cls.meta["md5"]]]
    files = tuple(f"{folder}/{f}" for f, _ in listed)
    train_files = tuple(f"{folder}/{f}" for f, _ in cls.train_list)
    test_files = tuple(f"{folder}/{f}" for f, _ in cls.test_list)
    name = f"cifar{classes}"
    official = {f"{folder}/{f}": m for f, m in (*cls.train_list, *cls.test_list)}

    def read(base: Path) -> Arrays:
        _check_meta(base, files[-1], cls.meta["key"])
        arrays = (*_cifar_split(base, train_files), *_cifar_split(base, test_files))
        if _md5_differs(base, official):
            log.warning("%s: files under %s differ from the official release (MD5); loaded them after structural checks", name, base)
        return arrays

    return Source(
        name,
        files,
        read=read,
        download=lambda base: cls(str(base), train=True, download=True),
        num_classes=classes,
        md5={f"{folder}/{f}": m for f, m in listed},
        url=f"{cls.url} (extract into data-root)",
    )


def sources() -> list[Source]:
    return [mnist_source(), *(emnist_source(s) for s in EMNIST_SPLITS), cifar_source(10), cifar_source(100)]
