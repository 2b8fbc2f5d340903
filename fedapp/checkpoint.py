"""The server's per-round checkpoint, and what ``resume=true`` may change.

After every finished round the server writes ``checkpoint.npz`` in the run folder,
atomically, after that round's metrics row: global arrays, the round, the sampling RNG,
the method's server state (``ServerPolicy.state()``) and the run token that names the
clients' state folders. A SuperLink or ServerApp crash therefore loses at most the round
in flight; a resumed run drops any metrics row newer than the checkpoint and redoes it,
so no round is lost or repeated.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.config import ConfigError
from fedapp.state import save_npz_atomic

FILE = "checkpoint.npz"
# keys a resumed run may change: how long to run and wait, not what is learned
RESUMABLE = frozenset({"resume", "num-server-rounds", "round-timeout", "min-replies", "num-threads", "device"})


@dataclass
class Checkpoint:
    round: int
    arrays: dict[str, np.ndarray]
    policy: dict[str, np.ndarray]
    rng: tuple[Any, ...]  # random.Random.getstate() of the strategy's sampler
    token: str
    finished: bool = False  # the method stopped early (e.g. FedSPU early stopping)


def new_token(run_dir: str | Path) -> str:
    """A fresh run token: readable (run folder name, start time) and unique."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(run_dir).name).strip("-.") or "run"
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def save(run_dir: str | Path, ckpt: Checkpoint) -> Path:
    version, internal, gauss = ckpt.rng
    meta = {"round": ckpt.round, "token": ckpt.token, "finished": ckpt.finished, "rng": [version, list(internal), gauss]}
    payload = {f"global/{k}": v for k, v in ckpt.arrays.items()}
    payload.update({f"policy/{k}": v for k, v in ckpt.policy.items()})
    payload["meta"] = np.array(json.dumps(meta))
    path = Path(run_dir) / FILE
    save_npz_atomic(path, payload)
    return path


def load(run_dir: str | Path) -> Checkpoint | None:
    path = Path(run_dir) / FILE
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        arrays = {k.removeprefix("global/"): data[k] for k in data.files if k.startswith("global/")}
        policy = {k.removeprefix("policy/"): data[k] for k in data.files if k.startswith("policy/")}
    version, internal, gauss = meta["rng"]
    return Checkpoint(int(meta["round"]), arrays, policy, (version, tuple(internal), gauss), str(meta["token"]), bool(meta["finished"]))


def client_state_dir(run_dir: str | Path) -> Path:
    """Where a simulation's disk-stored client state lives: ``<run-dir>/client-state/<token>``."""
    ckpt = load(run_dir)
    if ckpt is None:
        raise FileNotFoundError(f"{Path(run_dir) / FILE} does not exist: no run has checkpointed in {run_dir}")
    return Path(run_dir) / "client-state" / ckpt.token


def check_compatible(run_dir: str | Path, config: dict[str, Any]) -> None:
    """A resumed run must learn the same thing: only keys in RESUMABLE may differ."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        return
    old = json.loads(path.read_text())
    for key in sorted(set(old) | set(config)):
        if key not in RESUMABLE and old.get(key) != config.get(key):
            raise ConfigError(
                f"resume=true: run-config key '{key}' = {config.get(key)!r} differs from {old.get(key)!r} in {path}; "
                f"a resumed run may change only {', '.join(sorted(RESUMABLE))} (use another run-dir for a new run)"
            )
