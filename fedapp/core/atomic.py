"""Write a file so that a crash leaves either the old file or the new one, never half of it."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: Path, write: Callable[[BinaryIO], object], mode: int | None = None, sync: bool = True) -> None:
    """Create ``path``'s folder, ``write`` into a temporary file beside it (created 0600; ``mode``,
    if given, set before any byte is written), sync it, then rename it over ``path``. ``sync=False``
    leaves the sync to the caller (``sync_files``, once for many files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            write(fh)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sync_files(paths: list[Path]) -> None:
    """fsync files written with ``write_atomic(..., sync=False)``, and their folders: one journal
    commit carries them all, where a sync per file costs one each."""
    for p in [*paths, *{p.parent for p in paths}]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
