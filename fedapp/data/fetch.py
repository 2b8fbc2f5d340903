"""`fedapp data fetch` and `fedapp data check`: download through medmnist's and
torchvision's own code, and verify what is under a data-root by reading it with the
same loaders a run uses (plus the official MD5 where the package records one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fedapp.core.config import ConfigError
from fedapp.data import catalog
from fedapp.data.errors import DataFileError, describe
from fedapp.data.source import Source


class FetchError(RuntimeError):
    """A download failed (typically: the machine is offline)."""


@dataclass
class Report:
    source: str
    status: str  # ok | missing | incomplete | corrupt
    lines: list[str] = field(default_factory=list)
    unofficial: list[str] = field(default_factory=list)  # files whose MD5 differs from the official release

    def text(self) -> str:
        return "\n".join([f"{self.source}: {self.status}", *(f"  {line}" for line in self.lines)])


def _md5(path: Path) -> str:
    from torchvision.datasets.utils import calculate_md5

    return calculate_md5(path)


def check_source(src: Source, root: str, md5: bool = True) -> Report:
    base = Path(root).expanduser()
    present = [f for f in src.files if (base / f).is_file()]
    if not present:
        return Report(src.name, "missing", [f"no files under {base.resolve()} (first expected: {src.files[0]})"])
    if len(present) < len(src.files):
        absent = [f for f in src.files if f not in present]
        return Report(src.name, "incomplete", [f"missing {f}" for f in absent])
    try:
        x_tr, _, x_te, _ = src.load(str(base), src.name)
    except DataFileError as err:
        return Report(src.name, "corrupt", [str(err)])
    report = Report(
        src.name, "ok", [f"train {x_tr.shape[0]} x {tuple(x_tr.shape[1:])}, test {x_te.shape[0]} images, {src.num_classes} classes"]
    )
    for rel in src.files:
        official = src.md5.get(rel)
        if not md5 or official is None:
            report.lines.append(
                f"{rel}: readable" + ("" if md5 else " (MD5 not checked)") + ("" if official or not md5 else " (no official MD5 recorded)")
            )
        elif _md5(base / rel) == official:
            report.lines.append(f"{rel}: readable, MD5 matches the official release")
        else:
            report.lines.append(f"{rel}: readable, but MD5 differs from the official release ({official})")
            report.unofficial.append(rel)
    return report


def sources_named(names: list[str]) -> list[Source]:
    known = catalog.dataset_names()
    out: list[Source] = []
    for name in names:
        if name not in known:
            raise ConfigError(f"unknown dataset {name!r}; known: {', '.join(known)}")
        out.extend(s for s in catalog.sources_for(name) if s not in out)
    return out


def check(root: str, names: list[str], strict: bool = False, md5: bool = True) -> tuple[int, list[Report]]:
    """Exit status and reports. Without ``names``: every source with a file under ``root``."""
    if names:
        reports = [check_source(s, root, md5) for s in sources_named(names)]
        bad = [r for r in reports if r.status != "ok"]
    else:
        base = Path(root).expanduser()
        present = [catalog.source(n) for n in catalog.source_names()]
        present = [s for s in present if any((base / f).is_file() for f in s.files)]
        reports = [check_source(s, root, md5) for s in present]
        bad = [r for r in reports if r.status not in ("ok", "missing")]
    if strict:
        bad += [r for r in reports if r.unofficial and r not in bad]
    return (1 if bad else 0), reports


def fetch(name: str, root: str) -> list[Report]:
    """Download every source of dataset ``name`` that is not already readable under ``root``."""
    base = Path(root).expanduser()
    reports = []
    for src in sources_named([name]):
        before = check_source(src, root, md5=False)
        if before.status == "corrupt":
            raise FetchError(f"{before.text()}\nDelete the corrupt file, then run this fetch again.")
        if before.status != "ok":
            try:
                src.download(base)
            except Exception as err:
                cause = err.__cause__ or err.__context__
                why = describe(err) + (f" (cause: {describe(cause)})" if cause else "")
                raise FetchError(
                    f"could not download {src.name!r} into {base.resolve()}: {why}. If this machine is offline, get {src.url} "
                    f"on one that is online and place it so that {base.resolve() / src.files[0]} exists; "
                    f"then run: fedapp data check --root {root} {src.name}"
                ) from err
        reports.append(check_source(src, root))
    return reports
