"""The server's per-round checkpoint, and what ``resume=true`` may change.

After every finished round the server writes ``checkpoint.npz`` in the run folder,
atomically, after that round's metrics row: global arrays, the round, the sampling RNG,
the method's server state (``ServerPolicy.state()``) and the run token that names the
clients' state folders; and the clients' standing scores (fedapp.server.scores), with the
round's row instead where it waits for the next round's scores: a resumed run completes it.
A SuperLink or ServerApp crash therefore loses at most the round in flight; a resumed
run drops any metrics row newer than the checkpoint and redoes it, so no round is lost or repeated.

The checkpoint also holds the resolved run-config (less the keys in RESUMABLE) and its hash:
``resume=true`` with a config that learns something else is refused, naming the keys. It carries
its run's identity: the digest of the metrics rows written up to its round (``rows``,
fedapp.server.results.rows_digest). A resume whose metrics.jsonl does not hold those rows (another
run's checkpoint copied in, or another run's rows) is refused before anything is written. The file
is read only as a regular file inside the run folder, its archive members checked before any is
read (fedapp.core.safe_read).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.core.config import ConfigError
from fedapp.core.safe_read import UnsafeFile, read_npz
from fedapp.core.state import save_npz_atomic, token_folder
from fedapp.core.state_rounds import Lineage
from fedapp.server.results import read_metrics_upto, rows_digest
from fedapp.server.rundir import CLIENT_STATE
from fedapp.server.scores import parse_meta

FILE = "checkpoint.npz"
# keys a resumed run may change: how long to run and wait, not what is learned
RESUMABLE = frozenset(
    {"resume", "num-server-rounds", "round-timeout", "min-replies", "num-threads", "device", "overwrite", "discovery-timeout", "run-dir"}
)


@dataclass
class Checkpoint:
    round: int
    arrays: dict[str, np.ndarray]
    policy: dict[str, np.ndarray]
    rng: tuple[Any, ...]  # random.Random.getstate() of the strategy's sampler
    token: str
    finished: bool = False  # the method stopped early (e.g. FedSPU early stopping)
    config: dict[str, Any] | None = None  # the run's resolved config less RESUMABLE (None: an older checkpoint)
    lineage: str = ""  # the server starts whose client-state versions count (fedapp.core.state_rounds.Lineage; '' = one)
    scores: dict[str, Any] | None = None  # standing scores, and this round's row while it waits for the next round's (fedapp.server.scores)
    rows: str = ""  # digest of the run's metrics rows up to this round (results.rows_digest; '' = an older checkpoint)


def learned(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that decides what is learned: everything but RESUMABLE."""
    return {k: v for k, v in config.items() if k not in RESUMABLE and k != "provenance"}


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(learned(config), sort_keys=True).encode()).hexdigest()


def new_token(run_dir: str | Path) -> str:
    """A fresh run token: readable (run folder name, start time) and unique."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(run_dir).name).strip("-.") or "run"
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def save(run_dir: str | Path, ckpt: Checkpoint) -> Path:
    version, internal, gauss = ckpt.rng
    meta: dict[str, Any] = {"round": ckpt.round, "token": ckpt.token, "finished": ckpt.finished, "rng": [version, list(internal), gauss]}
    if ckpt.lineage:
        meta["lineage"] = ckpt.lineage
    if ckpt.scores is not None:
        meta["scores"] = ckpt.scores
    if ckpt.rows:
        meta["rows"] = ckpt.rows
    if ckpt.config is not None:
        meta.update({"config": learned(ckpt.config), "config-hash": config_hash(ckpt.config)})
    payload = {f"global/{k}": v for k, v in ckpt.arrays.items()}
    payload.update({f"policy/{k}": v for k, v in ckpt.policy.items()})
    payload["meta"] = np.array(json.dumps(meta))
    path = Path(run_dir) / FILE
    save_npz_atomic(path, payload)
    return path


def load(run_dir: str | Path) -> Checkpoint | None:
    path = Path(run_dir) / FILE
    if not os.path.lexists(path):
        return None
    try:
        data = read_npz(path, run_dir)
        meta = json.loads(str(data["meta"]))
        arrays = {k.removeprefix("global/"): v for k, v in data.items() if k.startswith("global/")}
        policy = {k.removeprefix("policy/"): v for k, v in data.items() if k.startswith("policy/")}
        version, internal, gauss = meta["rng"]
        rng = (version, tuple(internal), gauss)
        lineage, rows, token = str(meta.get("lineage", "")), str(meta.get("rows", "")), str(meta["token"])
        scores = meta.get("scores")
        parse_meta(scores)  # damaged: refused here, before the run folder changes
        return Checkpoint(int(meta["round"]), arrays, policy, rng, token, bool(meta["finished"]), meta.get("config"), lineage, scores, rows)
    except (OSError, ValueError, KeyError, TypeError, EOFError) as err:
        why = err.why if isinstance(err, UnsafeFile) else str(err)
        raise ConfigError(f"checkpoint {path} is damaged or not a fedapp checkpoint ({why}); move it away, or set overwrite=true") from None


def client_state_dir(run_dir: str | Path) -> Path:
    """Where a simulation's disk-stored client state lives: ``<run-dir>/client-state/<token>``."""
    ckpt = load(run_dir)
    if ckpt is None:
        raise FileNotFoundError(f"{Path(run_dir) / FILE} does not exist: no run has checkpointed in {run_dir}")
    return Path(run_dir) / CLIENT_STATE / ckpt.token


def check_compatible(run_dir: str | Path, config: dict[str, Any], ckpt: Checkpoint | None = None) -> None:
    """A resumed run must learn the same thing: only keys in RESUMABLE may differ. Compared with
    the config stored in the checkpoint (or, for an older checkpoint, with config.json)."""
    if ckpt is not None and ckpt.config is not None:
        old, where = ckpt.config, Path(run_dir) / FILE
    else:
        where = Path(run_dir) / "config.json"
        if not where.exists():
            return
        old = learned(json.loads(where.read_text()))
    new = learned(config)
    differ = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if differ:
        first = differ[0]
        more = f" (also {', '.join(differ[1:])})" if differ[1:] else ""
        raise ConfigError(
            f"resume=true: run-config key '{first}' = {new.get(first)!r} differs from {old.get(first)!r} in {where}{more}; "
            f"a resumed run may change only {', '.join(sorted(RESUMABLE))} (use another run-dir for a new run)"
        )


def check_state_kept(info: dict[int, dict[str, Any]]) -> None:
    """Refuse to resume a method with client state whose nodes kept it in Context.state: outside the
    in-process engine that memory belongs to the old Flower run, so every client would start afresh."""
    lost = sorted(pid for pid, facts in info.items() if facts.get("state-store") == "context")
    if lost:
        raise ConfigError(
            f"resume=true: the node of partition {lost[0]} ({len(lost)} of {len(info)} nodes) kept its client state in Context.state "
            "(state-store = 'context', or 'auto' without a node-config state-dir), which ended with the interrupted run: resuming "
            "would restart those clients from scratch. Start afresh (overwrite=true); give nodes a state-dir to make runs resumable"
        )


def check_contents(run_dir: str | Path, ckpt: Checkpoint, initial: dict[str, np.ndarray], num_rounds: int) -> None:
    """What a resumed run takes from a checkpoint must be what this run would have written:
    round 1..num-server-rounds, the model's exact arrays (names, shapes, dtypes), finite floats,
    a sampler state, a run token and lineage the clients accept. Checked before any training."""
    where = Path(run_dir) / FILE

    def bad(what: str) -> ConfigError:
        return ConfigError(f"checkpoint {where}: {what}; move it away, or set overwrite=true")

    if not 1 <= ckpt.round <= num_rounds:
        raise bad(f"round {ckpt.round} is outside 1..{num_rounds} (num-server-rounds)")
    if set(ckpt.arrays) != set(initial):
        odd = sorted(set(ckpt.arrays) ^ set(initial))[0]
        raise bad(f"array {odd!r} is {'not in the model' if odd in ckpt.arrays else 'missing'}")
    for name, want in initial.items():
        got = ckpt.arrays[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise bad(f"array {name!r} is {got.dtype}{list(got.shape)}, the model's is {want.dtype}{list(want.shape)}")
        if got.dtype.kind in "fc" and not np.isfinite(got).all():
            raise bad(f"array {name!r} has {int((~np.isfinite(got)).sum())} non-finite values")
    for name, a in ckpt.policy.items():
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            raise bad(f"method state {name!r} has non-finite values")
    try:
        rows = read_metrics_upto(run_dir, ckpt.round) if ckpt.rows else []
    except UnsafeFile as err:
        raise bad(f"cannot check it against its run's rows ({err})") from None
    if ckpt.rows and ckpt.rows != rows_digest(rows):
        raise bad(
            f"it belongs to another run: metrics.jsonl does not hold the rows of rounds 1..{ckpt.round} it was written after "
            "(a checkpoint or metrics file copied from another run folder?)"
        )
    try:
        random.Random().setstate(ckpt.rng)
        token_folder(".", ckpt.token)
        Lineage.parse(ckpt.lineage)
    except (TypeError, ValueError) as err:
        raise bad(str(err)) from None
