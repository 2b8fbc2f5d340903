"""A data-root cannot run code: CIFAR batches are read by a restricted unpickler that
refuses a crafted pickle (naming the file, before it runs) and still reads the real
format exactly as torchvision's own CIFAR classes do; MedMNIST's .npz refuses pickled
object arrays."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedapp.data import load_dataset
from fedapp.data.errors import DataFileError
from tests.data_files import write_cifar10, write_cifar100, write_medmnist


class Touch:
    """Unpickling this calls ``open(path, "w")``: the file appears if the loader runs it."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def fresh_load(name: str, root: Path) -> Any:
    load_dataset.cache_clear()
    return load_dataset(name, 0, str(root))


def test_the_crafted_pickle_does_run_under_plain_pickle(tmp_path: Path) -> None:
    """The payload the tests below use is live: plain ``pickle.loads`` creates the file."""
    pickle.loads(pickle.dumps({"data": Touch(tmp_path / "proof")}, protocol=2)).get("data").close()
    assert (tmp_path / "proof").exists()


@pytest.mark.parametrize("rel", ["cifar-10-batches-py/data_batch_2", "cifar-10-batches-py/test_batch", "cifar-10-batches-py/batches.meta"])
@pytest.mark.parametrize("protocol", [2, 5])
def test_a_crafted_cifar_pickle_is_refused_naming_the_file_and_does_not_run(tmp_path: Path, rel: str, protocol: int) -> None:
    root, marker = tmp_path / "root", tmp_path / "pwned"
    write_cifar10(root, 3, 2)
    with (root / rel).open("rb") as fh:
        batch = pickle.load(fh, encoding="latin1")  # the real (generated) batch, with the payload added
    batch["filenames"] = Touch(marker)
    (root / rel).write_bytes(pickle.dumps(batch, protocol=protocol))
    with pytest.raises(DataFileError) as err:
        fresh_load("cifar10", root)
    msg = str(err.value)
    assert f"the file {rel} at {(root / rel).resolve()} is corrupt" in msg and "io.open is not allowed in a CIFAR batch" in msg, msg
    assert "\n" not in msg
    assert not marker.exists()


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_real_format_batches_load_as_torchvision_loads_them(tmp_path: Path, name: str, protocol: int) -> None:
    """torchvision's own class (MD5 gate lifted, these are generated files) is the reference."""
    import torchvision.datasets as tvd

    write = write_cifar10 if name == "cifar10" else write_cifar100
    files = write(tmp_path, 2, 1, seed=7)
    cls = tvd.CIFAR10 if name == "cifar10" else tvd.CIFAR100
    for f, _ in (*cls.train_list, *cls.test_list, (cls.meta["filename"], "")):
        path = tmp_path / cls.base_folder / f
        with path.open("rb") as fh:
            path.write_bytes(pickle.dumps(pickle.load(fh, encoding="latin1"), protocol=protocol))

    class Reference(cls):  # type: ignore[valid-type,misc]
        def _check_integrity(self) -> bool:
            return True

        def _load_meta(self) -> None:
            self.classes: list[str] = []

    ds = fresh_load(name, tmp_path)
    for split, x, y in (("train", ds.x_train, ds.y_train), ("test", ds.x_test, ds.y_test)):
        ref = Reference(str(tmp_path), train=split == "train", download=False)
        np.testing.assert_array_equal(x, ref.data.transpose(0, 3, 1, 2))
        np.testing.assert_array_equal(y, np.asarray(ref.targets))
        np.testing.assert_array_equal(x, files[f"x_{split}"])
        assert x.dtype == np.uint8 and x.flags.c_contiguous and y.dtype == np.int64


def test_a_medmnist_npz_with_a_pickled_object_array_is_refused_and_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    write_medmnist(tmp_path, "pathmnist", 9, {"train": 3, "val": 1, "test": 2}, rgb=True)
    with np.load(tmp_path / "pathmnist.npz") as npz:
        arrays = dict(npz)
    arrays["train_labels"] = np.array([Touch(marker)], dtype=object)
    np.savez(tmp_path / "pathmnist.npz", **arrays)  # an object array is stored as a pickle
    with pytest.raises(DataFileError, match=r"the file pathmnist\.npz at .* is corrupt"):
        fresh_load("pathmnist", tmp_path)
    assert not marker.exists()
