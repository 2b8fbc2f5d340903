"""Errors for dataset files: each names the file expected, where it was looked for,
and the command that fetches it, so a run stops before training with a fix in hand."""

from __future__ import annotations

from pathlib import Path

from fedapp.core.config import ConfigError


class DataFileError(ConfigError):
    """A dataset file is missing, unreadable or not in the expected format."""


class BadFile(Exception):
    """Raised by a reader: ``relpath`` (relative to data-root) could not be read as expected."""

    def __init__(self, relpath: str, cause: object):
        super().__init__(f"{relpath}: {cause}")
        self.relpath, self.cause = relpath, cause


def describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def fetch_hint(name: str, root: str | Path) -> str:
    return f"fedapp data fetch {name} --root {root}"


def no_root(dataset: str, first_file: str, fetch_name: str) -> DataFileError:
    return DataFileError(
        f"run-config key 'data-root' = '' but dataset {dataset!r} is read from files (first expected: {first_file}). "
        f"Set data-root to the folder that holds them, e.g. data-root='/data'; fetch them with: {fetch_hint(fetch_name, '/data')}"
    )


def missing(dataset: str, relpath: str, root: str | Path, fetch_name: str, more: int = 0) -> DataFileError:
    where = Path(root).resolve() / relpath
    others = f" (and {more} more file(s) of {fetch_name!r})" if more else ""
    return DataFileError(
        f"dataset {dataset!r} needs the file {relpath}{others}: not found at {where} "
        f"(run-config key 'data-root' = {str(root)!r}). Fetch it with: {fetch_hint(fetch_name, root)}"
    )


def corrupt(dataset: str, relpath: str, root: str | Path, cause: object, fetch_name: str) -> DataFileError:
    where = Path(root).resolve() / relpath
    return DataFileError(
        f"dataset {dataset!r}: the file {relpath} at {where} is corrupt or not in the expected format ({cause}). "
        f"Delete it, then fetch it again with: {fetch_hint(fetch_name, root)}"
    )
