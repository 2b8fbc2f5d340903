"""What a run folder's provenance must say, computed independently of fedapp.server.provenance:
the commit, dirty flag and diff digest from git's own output, the versions from the installed
distributions, each node's data digest from the arrays ``client_data`` loads. Used by the tests of
every mode (in-process, engine workers, `flwr run`, deployment)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.core.config import RunConfig, parse
from fedapp.data import client_data

NAMES = ("fedapp", "flwr", "torch", "torchvision", "numpy")


def git_out(root: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=True).stdout


def expected_git(root: Path) -> dict[str, Any]:
    """The commit, dirty flag and diff digest of ``root``, from git's own output."""
    diff = git_out(root, "diff", "HEAD", "--binary")
    untracked = sorted(n for n in git_out(root, "ls-files", "--others", "--exclude-standard", "-z").decode().split("\0") if n)
    h = hashlib.sha256(diff)
    for name in untracked:
        h.update(f"\0untracked {name}\0".encode() + (root / name).read_bytes())
    dirty = bool(diff) or bool(untracked)
    return {"commit": git_out(root, "rev-parse", "HEAD").decode().strip(), "dirty": dirty, "diff-sha256": h.hexdigest() if dirty else None}


def digest_of(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(f"{a.dtype.str}{a.shape}".encode() + np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def check_recorded(prov: dict[str, Any], config: dict[str, Any], checkout: Path) -> None:
    """Every provenance field of a run made from ``checkout`` with the run-config ``config`` (resolved)."""
    git = prov["git"]
    assert git is not None, prov.get("git-unknown")
    assert {k: git[k] for k in ("commit", "dirty", "diff-sha256")} == expected_git(checkout)
    assert {k: prov["packages"][k] for k in NAMES} == {k: importlib.metadata.version(k) for k in NAMES}
    assert prov["device"] == "cpu" and prov["threads"]["num-threads"] == config["num-threads"]
    assert prov["threads"]["torch-threads"] == config["num-threads"] and prov["threads"]["OMP_NUM_THREADS"] == str(config["num-threads"])
    cfg = parse(RunConfig, config)
    assert sorted(prov["nodes"]) == [str(p) for p in range(cfg.num_clients)]
    for pid, node in prov["nodes"].items():
        d = client_data(cfg, int(pid))
        assert node["data-sha256"] == digest_of([d.x_train, d.y_train, d.x_test, d.y_test])
        assert node["versions"] == {k: importlib.metadata.version(k) for k in NAMES}
