"""Write tiny dataset files in the exact on-disk formats the real loaders read:
MedMNIST .npz (train/val/test images and labels), torchvision's MNIST/EMNIST raw IDX
files, and the CIFAR-10/100 python pickles. Images are seeded random bytes with a
class-dependent brightness, so the returned arrays can be compared with what loads.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np


def images(rng: np.random.Generator, labels: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    noise = rng.integers(0, 128, size=(len(labels), *shape))
    return (noise + (labels.reshape(-1, *([1] * len(shape))) * 11) % 128).astype(np.uint8)


def block_images(rng: np.random.Generator, labels: np.ndarray) -> np.ndarray:
    """28x28 images of 4x4 flat 7x7 blocks; blocks 0 and 1 hold the sample index (low, high byte),
    so it can be read back exactly after a bilinear resize (block interiors stay flat)."""
    blocks = rng.integers(0, 256, size=(len(labels), 4, 4))
    ids = np.arange(len(labels))
    blocks[:, 0, 0], blocks[:, 0, 1] = ids % 256, ids // 256
    return np.kron(blocks, np.ones((7, 7), dtype=np.int64)).astype(np.uint8)


def balanced_labels(per_class: int | list[int], num_classes: int, rng: np.random.Generator) -> np.ndarray:
    counts = per_class if isinstance(per_class, list) else [per_class] * num_classes
    return rng.permutation(np.repeat(np.arange(num_classes), counts))


# ---------------------------------------------------------------- MedMNIST


def write_medmnist(
    root: Path, flag: str, num_classes: int, per_class: dict[str, int], size: int = 28, rgb: bool = False, seed: int = 0
) -> dict[str, np.ndarray]:
    """``<root>/<flag>[_<size>].npz`` with {split}_images (N, size, size[, 3]) uint8 and {split}_labels (N, 1)."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for split in ("train", "val", "test"):
        y = balanced_labels(per_class[split], num_classes, rng)
        arrays[f"{split}_images"] = images(rng, y, (size, size, 3) if rgb else (size, size))
        arrays[f"{split}_labels"] = y.astype(np.uint8)[:, None]
    root.mkdir(parents=True, exist_ok=True)
    name = f"{flag}.npz" if size == 28 else f"{flag}_{size}.npz"
    np.savez_compressed(root / name, **arrays)  # type: ignore[arg-type]
    return arrays


# ---------------------------------------------------------------- MNIST / EMNIST (IDX)


def write_idx(path: Path, array: np.ndarray) -> None:
    """IDX ("SN3 Pascal Vincent") file: magic 0x0000 08 <ndim>, big-endian int32 dims, uint8 data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def write_mnist(
    root: Path, train_per_class: int | list[int], test_per_class: int | list[int], seed: int = 0,
    folder: str = "MNIST", prefix: tuple[str, str] = ("train", "t10k"), num_classes: int = 10, blocks: bool = False,
) -> dict[str, np.ndarray]:  # fmt: skip
    rng = np.random.default_rng(seed)
    out = {}
    for split, per_class, file_split in (("train", train_per_class, prefix[0]), ("test", test_per_class, prefix[1])):
        y = balanced_labels(per_class, num_classes, rng)
        x = block_images(rng, y) if blocks else images(rng, y, (28, 28))
        write_idx(root / folder / "raw" / f"{file_split}-images-idx3-ubyte", x)
        write_idx(root / folder / "raw" / f"{file_split}-labels-idx1-ubyte", y.astype(np.uint8))
        out[f"x_{split}"], out[f"y_{split}"] = x, y
    return out


def write_emnist(
    root: Path, split: str, num_classes: int, train_per_class: int, test_per_class: int, seed: int = 0
) -> dict[str, np.ndarray]:
    return write_mnist(
        root, train_per_class, test_per_class, seed, "EMNIST", (f"emnist-{split}-train", f"emnist-{split}-test"), num_classes
    )


# ---------------------------------------------------------------- CIFAR (python pickles)


def _pickle(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        pickle.dump(obj, fh, protocol=2)


def write_cifar10(root: Path, train_per_class: int | list[int], test_per_class: int | list[int], seed: int = 0) -> dict[str, np.ndarray]:
    """cifar-10-batches-py/: data_batch_1..5 and test_batch ({'data': uint8 (N, 3072), 'labels': [...]}), batches.meta."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    y_tr, y_te = balanced_labels(train_per_class, 10, rng), balanced_labels(test_per_class, 10, rng)
    x_tr, x_te = images(rng, y_tr, (3, 32, 32)), images(rng, y_te, (3, 32, 32))
    for i, chunk in enumerate(np.array_split(np.arange(len(y_tr)), 5), start=1):
        batch = {
            "batch_label": f"training batch {i} of 5",
            "labels": y_tr[chunk].tolist(),
            "data": x_tr[chunk].reshape(len(chunk), -1),
            "filenames": [f"img{j}.png" for j in chunk],
        }
        _pickle(folder / f"data_batch_{i}", batch)
    _pickle(
        folder / "test_batch",
        {"batch_label": "testing batch 1 of 1", "labels": y_te.tolist(), "data": x_te.reshape(len(y_te), -1), "filenames": []},
    )
    _pickle(
        folder / "batches.meta",
        {
            "label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"],
            "num_cases_per_batch": 10000,
            "num_vis": 3072,
        },
    )
    return {"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te}


def write_cifar100(root: Path, train_per_class: int, test_per_class: int, seed: int = 0) -> dict[str, np.ndarray]:
    """cifar-100-python/: train and test ({'data', 'fine_labels', 'coarse_labels', ...}) and meta."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    out = {}
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        y = balanced_labels(per_class, 100, rng)
        x = images(rng, y, (3, 32, 32))
        _pickle(
            folder / split,
            {
                "filenames": [],
                "batch_label": split,
                "fine_labels": y.tolist(),
                "coarse_labels": (y // 5).tolist(),
                "data": x.reshape(len(y), -1),
            },
        )
        out[f"x_{split}"], out[f"y_{split}"] = x, y
    _pickle(folder / "meta", {"fine_label_names": [f"c{i}" for i in range(100)], "coarse_label_names": [f"s{i}" for i in range(20)]})
    return out
