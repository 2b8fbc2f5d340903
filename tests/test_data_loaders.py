"""Real loaders on generated files in the real on-disk formats: MedMNIST .npz through the
medmnist package, MNIST/EMNIST IDX through torchvision, CIFAR pickles (restricted unpickler), the FedPeWS
mixed-source sets, the "source" partition and the per-dataset normalisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedapp.core.config import ConfigError, RunConfig
from fedapp.data import client_data, dataset_for, load_dataset
from tests.data_files import write_cifar10, write_cifar100, write_emnist, write_medmnist, write_mnist

MED = {"train": 6, "val": 2, "test": 3}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, np.ndarray]]]:
    r = tmp_path_factory.mktemp("data-root")
    files = {
        "cifar10": write_cifar10(r, 30, 10, seed=1),
        "mnist": write_mnist(r, 410, 205, seed=2, blocks=True),
        "cifar100": write_cifar100(r, 3, 1, seed=3),
        "emnist": write_emnist(r, "byclass", 62, 2, 1, seed=4),
        "pathmnist": write_medmnist(r, "pathmnist", 9, MED, rgb=True, seed=5),
        "octmnist": write_medmnist(r, "octmnist", 4, {"train": 500, "val": 2, "test": 250}, seed=6),
        "tissuemnist": write_medmnist(r, "tissuemnist", 8, MED, seed=7),
        "pathmnist-64": write_medmnist(r, "pathmnist", 9, {"train": 2, "val": 1, "test": 1}, size=64, rgb=True, seed=8),
    }
    return r, files


def cfg(root: Path, **kw: object) -> RunConfig:
    return RunConfig(data_root=str(root), **kw)  # type: ignore[arg-type]


def test_medmnist_npz_through_medmnist(root: tuple[Path, dict]) -> None:
    r, files = root
    ds = load_dataset("pathmnist", 0, str(r))
    f = files["pathmnist"]
    np.testing.assert_array_equal(ds.x_train, f["train_images"].transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(ds.y_train, f["train_labels"][:, 0])
    np.testing.assert_array_equal(ds.x_test, f["test_images"].transpose(0, 3, 1, 2))
    assert ds.num_classes == 9 and ds.x_train.dtype == np.uint8 and ds.in_shape == (3, 28, 28)
    grey = load_dataset("octmnist", 0, str(r))
    np.testing.assert_array_equal(grey.x_train[:, 0], files["octmnist"]["train_images"])
    assert grey.in_shape == (1, 28, 28) and grey.num_classes == 4
    big = load_dataset("pathmnist-64", 0, str(r))
    np.testing.assert_array_equal(big.x_test, files["pathmnist-64"]["test_images"].transpose(0, 3, 1, 2))
    assert big.in_shape == (3, 64, 64)


def test_medmnist_default_normalisation_is_half(root: tuple[Path, dict]) -> None:
    r, _files = root
    c = cfg(r, dataset="pathmnist", partition="iid", num_clients=1)
    data = client_data(c, 0)
    ds = load_dataset("pathmnist", 0, str(r))
    expected = (ds.x_train.astype(np.float64) / 255 - 0.5) / 0.5
    np.testing.assert_allclose(data.x_train, expected, atol=1e-6)
    assert data.x_train.dtype == np.float32 and data.augment is None


def test_mnist_and_emnist_idx_through_torchvision(root: tuple[Path, dict]) -> None:
    r, files = root
    ds = load_dataset("mnist", 0, str(r))
    np.testing.assert_array_equal(ds.x_train[:, 0], files["mnist"]["x_train"])
    np.testing.assert_array_equal(ds.y_test, files["mnist"]["y_test"])
    assert ds.num_classes == 10 and ds.in_shape == (1, 28, 28)
    em = load_dataset("emnist", 0, str(r))
    np.testing.assert_array_equal(em.x_test[:, 0], files["emnist"]["x_test"])
    np.testing.assert_array_equal(em.y_train, files["emnist"]["y_train"])
    assert em.num_classes == 62
    data = client_data(cfg(r, dataset="mnist", partition="iid", num_clients=1), 0)
    np.testing.assert_allclose(data.x_train, ds.x_train / 255.0, atol=1e-7)  # FedSPU: ToTensor only


def test_cifar_pickles_through_torchvision(root: tuple[Path, dict]) -> None:
    r, files = root
    ds = load_dataset("cifar10", 0, str(r))
    np.testing.assert_array_equal(ds.x_train, files["cifar10"]["x_train"])
    np.testing.assert_array_equal(ds.y_train, files["cifar10"]["y_train"])
    np.testing.assert_array_equal(ds.x_test, files["cifar10"]["x_test"])
    assert ds.x_train.flags.c_contiguous and ds.num_classes == 10
    c100 = load_dataset("cifar100", 0, str(r))
    np.testing.assert_array_equal(c100.x_test, files["cifar100"]["x_test"])
    np.testing.assert_array_equal(c100.y_train, files["cifar100"]["y_train"])
    assert c100.num_classes == 100
    # FedPart (Fling) CIFAR-100 defaults: its normalisation constants and flip/rotate/crop augmentation
    job = client_data(cfg(r, dataset="cifar100", partition="iid", num_clients=1), 0)
    assert job.augment is not None and dataset_for(cfg(r, dataset="cifar100")).norm.mean == (0.507, 0.487, 0.441)  # type: ignore[union-attr]
    assert client_data(cfg(r, dataset="cifar10", partition="iid", num_clients=1), 0).augment is None
    assert client_data(cfg(r, dataset="cifar10", partition="iid", num_clients=1, augment="crop-flip"), 0).augment is not None


def test_cifar10_normalisation_matches_torchvision_pipeline(root: tuple[Path, dict]) -> None:
    """normalize = half and imagenet equal ToTensor() + Normalize(mean, std) on the PIL image."""
    from torchvision import transforms as T

    r, _ = root
    raw = load_dataset("cifar10", 0, str(r))
    for choice, mean, std in (("half", (0.5,) * 3, (0.5,) * 3), ("imagenet", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))):
        ds = dataset_for(cfg(r, dataset="cifar10", normalize=choice))
        pipeline = T.Compose([T.ToTensor(), T.Normalize(mean, std)])
        for i in (0, 7, 299):
            ref = pipeline(Image.fromarray(raw.x_train[i].transpose(1, 2, 0))).numpy()
            np.testing.assert_allclose(ds.features(raw.x_train[i : i + 1])[0], ref, atol=1e-5)


def test_cifar_mnist_construction(root: tuple[Path, dict]) -> None:
    r, files = root
    ds = load_dataset("cifar-mnist", 0, str(r))
    assert ds.num_classes == 20 and ds.in_shape == (3, 32, 32) and ds.x_train.dtype == np.uint8
    # 400 / 200 per class, capped at what the fixture has (CIFAR: 30 / 10)
    np.testing.assert_array_equal(np.bincount(ds.y_train), [30] * 10 + [400] * 10)
    np.testing.assert_array_equal(np.bincount(ds.y_test), [10] * 10 + [200] * 10)
    # CIFAR images unchanged with labels 0-9; source id 1 (client 1)
    cifar = ds.y_train < 10
    originals = {files["cifar10"]["x_train"][i].tobytes(): int(y) for i, y in enumerate(files["cifar10"]["y_train"])}
    assert all(originals[x.tobytes()] == y for x, y in zip(ds.x_train[cifar], ds.y_train[cifar], strict=True))
    np.testing.assert_array_equal(ds.groups, np.where(cifar, 1, 0))
    # MNIST: PIL bilinear 28 -> 32, grey copied to 3 channels, labels + 10; the fixture's block ids name the source image
    mn = ds.x_train[~cifar]
    assert (mn[:, 0] == mn[:, 1]).all() and (mn[:, 0] == mn[:, 2]).all()
    ids = mn[:, 0, 3, 3].astype(int) + 256 * mn[:, 0, 3, 11].astype(int)
    assert len(set(ids.tolist())) == 4000
    src_x, src_y = files["mnist"]["x_train"], files["mnist"]["y_train"]
    np.testing.assert_array_equal(ds.y_train[~cifar], src_y[ids] + 10)
    for k in range(0, 4000, 97):
        ref = np.asarray(Image.fromarray(src_x[ids[k]]).resize((32, 32), Image.Resampling.BILINEAR)).astype(int)
        assert np.abs(mn[k, 0].astype(int) - ref).max() <= 1


def test_cifar_mnist_draw_is_seeded_by_data_seed(root: tuple[Path, dict]) -> None:
    r, _ = root
    a, b, c = (load_dataset("cifar-mnist", s, str(r)) for s in (0, 0, 1))
    assert a is b  # loaded once per process
    assert not np.array_equal(a.x_train[a.y_train >= 10], c.x_train[c.y_train >= 10])


def test_source_partition_and_train_stats(root: tuple[Path, dict]) -> None:
    r, _ = root
    c = cfg(r, dataset="cifar-mnist", partition="source", num_clients=2, model="cnn")
    mnist_client, cifar_client = client_data(c, 0), client_data(c, 1)
    assert (mnist_client.y_train >= 10).all() and mnist_client.y_train.size == 4000
    assert (cifar_client.y_train < 10).all() and cifar_client.y_train.size == 300
    # per-channel normalisation with the training set's statistics: the whole training set is standardised
    allx = np.concatenate([mnist_client.x_train, cifar_client.x_train]).astype(np.float64)
    np.testing.assert_allclose(allx.mean(axis=(0, 2, 3)), 0.0, atol=1e-4)
    np.testing.assert_allclose(allx.std(axis=(0, 2, 3)), 1.0, atol=1e-4)


def test_path_oct_tissue_construction(root: tuple[Path, dict]) -> None:
    r, _files = root
    ds = load_dataset("path-oct-tissue", 0, str(r))
    assert ds.num_classes == 21 and ds.in_shape == (3, 32, 32)
    np.testing.assert_array_equal(np.bincount(ds.y_train), [6] * 9 + [400] * 4 + [6] * 8)
    np.testing.assert_array_equal(np.bincount(ds.y_test), [3] * 9 + [200] * 4 + [3] * 8)
    expect_group = np.select([ds.y_train < 9, ds.y_train < 13], [0, 1], 2)
    np.testing.assert_array_equal(ds.groups, expect_group)
    grey = ds.x_train[ds.y_train >= 9]
    assert (grey[:, 0] == grey[:, 2]).all()
    path = ds.x_train[ds.y_train < 9]
    assert not (path[:, 0] == path[:, 1]).all()  # PathMNIST stays RGB
    c = cfg(r, dataset="path-oct-tissue", partition="source", num_clients=3)
    sizes = [client_data(c, i).y_train.size for i in range(3)]
    assert sizes == [54, 1600, 48]
    assert set(np.unique(client_data(c, 2).y_train)) == set(range(13, 21))


def test_source_partition_errors_name_the_key(root: tuple[Path, dict]) -> None:
    r, _ = root
    with pytest.raises(ConfigError, match="'partition' = 'source'"):
        client_data(cfg(r, dataset="cifar10", partition="source", num_clients=2), 0)
    with pytest.raises(ConfigError, match="'num-clients' = 3"):
        client_data(cfg(r, dataset="cifar-mnist", partition="source", num_clients=3), 0)


def test_multilabel_medmnist_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"'dataset' = 'chestmnist'.*multi-label"):
        load_dataset("chestmnist", 0, "/nonexistent")


def test_normalize_key_rejects_mismatches(root: tuple[Path, dict]) -> None:
    r, _ = root
    with pytest.raises(ConfigError, match=r"'normalize' = 'imagenet'.*3-channel"):
        dataset_for(cfg(r, dataset="mnist", normalize="imagenet"))
    with pytest.raises(ConfigError, match=r"'normalize' = 'half'.*not images"):
        dataset_for(cfg(r, dataset="digits", normalize="half"))


def test_client_slices_share_one_stored_copy(root: tuple[Path, dict]) -> None:
    """The stored uint8 arrays are read once per process and shared; client data is a float32 slice."""
    r, _ = root
    c = cfg(r, dataset="cifar10", partition="dirichlet", num_clients=3, min_partition_size=5)
    assert dataset_for(c) is dataset_for(c)
    assert np.shares_memory(dataset_for(c).x_train, load_dataset("cifar10", 0, str(r)).x_train)
    parts = [client_data(c, i) for i in range(3)]
    assert sum(p.y_train.size for p in parts) == 300
    assert all(p.x_train.dtype == np.float32 for p in parts)
