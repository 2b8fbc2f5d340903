"""Missing and corrupt dataset files stop a run before training with an error naming the
file expected, where it was looked for and the command that fetches it; `fedapp data
check` reports them; `fedapp data fetch` goes through the packages' real download code."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from fedapp.cli import main
from fedapp.core.config import ConfigError
from fedapp.data import load_dataset
from fedapp.data.errors import DataFileError
from tests.data_files import write_cifar10, write_medmnist, write_mnist


def fresh_load(name: str, root: Path | str) -> None:
    load_dataset.cache_clear()
    load_dataset(name, 0, str(root))


def test_empty_data_root_names_the_key_the_file_and_the_fetch_command() -> None:
    with pytest.raises(DataFileError) as err:
        fresh_load("cifar10", "")
    msg = str(err.value)
    assert "'data-root' = ''" in msg and "cifar-10-batches-py/data_batch_1" in msg and "fedapp data fetch cifar10 --root" in msg


def test_missing_file_names_file_place_and_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(DataFileError) as err:
        fresh_load("pathmnist", tmp_path)
    msg = str(err.value)
    assert f"not found at {tmp_path.resolve() / 'pathmnist.npz'}" in msg
    assert f"fedapp data fetch pathmnist --root {tmp_path}" in msg


def test_mixed_set_names_the_missing_source_file(tmp_path: Path) -> None:
    write_cifar10(tmp_path, 2, 1)
    with pytest.raises(DataFileError) as err:
        fresh_load("cifar-mnist", tmp_path)
    msg = str(err.value)
    assert "dataset 'cifar-mnist' needs the file MNIST/raw/train-images-idx3-ubyte (and 3 more file(s) of 'mnist')" in msg
    assert str(tmp_path.resolve() / "MNIST/raw/train-images-idx3-ubyte") in msg and f"fedapp data fetch mnist --root {tmp_path}" in msg


def test_one_missing_cifar_batch_is_named(tmp_path: Path) -> None:
    write_cifar10(tmp_path, 2, 1)
    (tmp_path / "cifar-10-batches-py/data_batch_4").unlink()
    with pytest.raises(DataFileError, match=r"needs the file cifar-10-batches-py/data_batch_4: not found"):
        fresh_load("cifar10", tmp_path)


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize(
    ("name", "relpath", "damage"),
    [
        ("pathmnist", "pathmnist.npz", truncate),
        ("pathmnist", "pathmnist.npz", lambda p: p.write_bytes(b"not a zip file at all")),
        ("cifar10", "cifar-10-batches-py/data_batch_3", truncate),
        ("cifar10", "cifar-10-batches-py/test_batch", lambda p: p.write_bytes(gzip.compress(b"junk"))),
        ("mnist", "MNIST/raw/t10k-labels-idx1-ubyte", lambda p: truncate(p, 0.3)),
        ("mnist", "MNIST/raw/train-images-idx3-ubyte", lambda p: p.write_bytes(b"\xff" * 64)),
        ("cifar-mnist", "MNIST/raw/train-images-idx3-ubyte", truncate),
    ],
)
def test_corrupt_file_is_named(tmp_path: Path, name: str, relpath: str, damage: object) -> None:
    write_medmnist(tmp_path, "pathmnist", 9, {"train": 3, "val": 1, "test": 2}, rgb=True)
    write_cifar10(tmp_path, 3, 2)
    write_mnist(tmp_path, 3, 2)
    damage(tmp_path / relpath)  # type: ignore[operator]
    with pytest.raises(DataFileError) as err:
        fresh_load(name, tmp_path)
    msg = str(err.value)
    assert f"the file {relpath} at {tmp_path.resolve() / relpath} is corrupt" in msg, msg
    assert f"fedapp data fetch {name if name != 'cifar-mnist' else 'mnist'} --root {tmp_path}" in msg


def test_label_count_mismatch_is_corrupt(tmp_path: Path) -> None:
    write_mnist(tmp_path, 3, 2)
    shutil.copy(tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte", tmp_path / "MNIST/raw/train-labels-idx1-ubyte")
    with pytest.raises(DataFileError, match=r"train-labels-idx1-ubyte .* is corrupt .*20 labels for the 30 images"):
        fresh_load("mnist", tmp_path)


def test_run_stops_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    code = main(["run", f"dataset='cifar-mnist' data-root='{tmp_path}' model='cnn' partition='source' run-dir='{run_dir}'"])
    err = capsys.readouterr().err
    assert code == 2 and "cifar-10-batches-py/data_batch_1" in err and f"fedapp data fetch cifar10 --root {tmp_path}" in err
    assert not run_dir.exists()


def test_data_check_reports_ok_unofficial_and_corrupt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_cifar10(tmp_path, 2, 1)
    write_medmnist(tmp_path, "bloodmnist", 8, {"train": 2, "val": 1, "test": 1}, rgb=True)
    assert main(["data", "check", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cifar10: ok" in out and "bloodmnist: ok" in out and "MD5 differs from the official release" in out
    assert main(["data", "check", "--root", str(tmp_path), "--strict", "cifar10"]) == 1  # generated files are not the official bytes
    assert main(["data", "check", "--root", str(tmp_path), "cifar-mnist"]) == 1  # MNIST missing
    assert "mnist: missing" in capsys.readouterr().out
    truncate(tmp_path / "bloodmnist.npz")
    assert main(["data", "check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "bloodmnist: corrupt" in out and "the file bloodmnist.npz" in out


def test_fetch_uses_the_packages_download_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Offline (CI, this machine) the real medmnist download fails and the error says what to place where;
    online it downloads BreastMNIST (0.5 MB) and the check passes."""
    code = main(["data", "fetch", "breastmnist", "--root", str(tmp_path)])
    captured = capsys.readouterr()
    if code == 0:
        assert "breastmnist: ok" in captured.out and "MD5 matches the official release" in captured.out
    else:
        assert code == 2
        assert "could not download 'breastmnist'" in captured.err and "zenodo.org" in captured.err
        assert str(tmp_path.resolve() / "breastmnist.npz") in captured.err


def test_fetch_refuses_to_overwrite_a_corrupt_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_mnist(tmp_path, 2, 1)
    truncate(tmp_path / "MNIST/raw/train-images-idx3-ubyte")
    assert main(["data", "fetch", "mnist", "--root", str(tmp_path)]) == 2
    assert "Delete the corrupt file" in capsys.readouterr().err


def test_unknown_dataset_name_for_fetch() -> None:
    with pytest.raises(ConfigError, match="unknown dataset 'cifar11'"):
        from fedapp.data.fetch import sources_named

        sources_named(["cifar11"])
