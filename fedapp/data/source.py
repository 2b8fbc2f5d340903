"""A Source: one set of files under data-root that a package downloads as a unit
(CIFAR-10's python batches, MNIST's raw IDX files, pathmnist_64.npz).

It knows the files it expects, their official MD5 where one is recorded, the
package's own download code (medmnist / torchvision) and the reader that turns the
files into uint8 (N, C, H, W) arrays. Loading checks every expected file exists
before reading, and turns any read failure into an error naming the file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedapp.data.errors import BadFile, corrupt, missing, no_root

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # x_train, y_train, x_test, y_test


@dataclass(frozen=True)
class Source:
    name: str  # what `fedapp data fetch` takes
    files: tuple[str, ...]  # paths relative to data-root
    read: Callable[[Path], Arrays]  # raises BadFile
    download: Callable[[Path], None]  # the package's own download code
    num_classes: int
    md5: Mapping[str, str] = field(default_factory=dict)  # official MD5 by relative path, where the package records one
    url: str = ""  # where the package downloads from (told to users whose machine is offline)

    def require(self, root: str, asked_by: str) -> Path:
        """The data-root as a Path, once every expected file is present (else a DataFileError)."""
        if not root:
            raise no_root(asked_by, self.files[0], self.name)
        base = Path(root).expanduser()
        absent = [f for f in self.files if not (base / f).is_file()]
        if absent:
            raise missing(asked_by, absent[0], base, self.name, more=len(absent) - 1)
        return base

    def load(self, root: str, asked_by: str) -> Arrays:
        base = self.require(root, asked_by)
        try:
            x_tr, y_tr, x_te, y_te = self.read(base)
        except BadFile as err:
            raise corrupt(asked_by, err.relpath, base, err.cause, self.name) from err
        for x, y, split in ((x_tr, y_tr, "train"), (x_te, y_te, "test")):
            if y.size and (y.min() < 0 or y.max() >= self.num_classes):
                bad = BadFile(self.files[0], f"{split} labels span {y.min()}..{y.max()}, expected 0..{self.num_classes - 1}")
                raise corrupt(asked_by, bad.relpath, base, bad.cause, self.name)
            assert x.dtype == np.uint8 and x.ndim == 4 and len(x) == len(y), (self.name, x.dtype, x.shape, y.shape)
        return x_tr, y_tr, x_te, y_te
