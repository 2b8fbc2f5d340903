"""`fedapp reproduce RUN_DIR [--rounds N]`: run a finished run again from its own config.json, in a
new folder on this machine (the in-process engine), and compare what must agree
(fedapp.server.run_compare): every metrics row without its timing keys, and ``model.npz``.

It says "identical" or names the first round and key, and the arrays, that differ; and it says
where the recorded commit, packages, device or data digests differ from the present ones, which
is why a difference may be expected. The serialized message sizes (``wire_bytes_*``, ``mb_total``)
are compared only where the new folder's path is as long as the recorded one's and the run was
not resumed: each message's config names the run folder and, after a resume, the lineage of
starts (the payload's ``bytes_up``/``bytes_down`` are always compared). With ``--rounds`` N below the recorded count, only
the first N rows are compared (the recorded model.npz is the last round's).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fedapp.core.config import ConfigError
from fedapp.server.results import read_config_and_provenance
from fedapp.server.run_compare import WIRE, first_row_difference, model_differences, outcome_rows

NOT_REPLAYED = {"resume": False, "overwrite": False}  # a new folder, one start


def new_folder(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}-reproduced-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def recorded(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's config and provenance, or ConfigError naming what makes it unusable."""
    if not (run_dir / "config.json").is_file() or not (run_dir / "metrics.jsonl").is_file():
        raise ConfigError(f"fedapp reproduce: {run_dir} is not a finished run folder (it needs config.json and metrics.jsonl)")
    config, provenance = read_config_and_provenance(run_dir)
    if "method" not in config or "num-server-rounds" not in config:
        raise ConfigError(f"fedapp reproduce: {run_dir / 'config.json'} holds no run-config (no 'method' or 'num-server-rounds')")
    return config, provenance


def provenance_notes(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Where what made the recorded run differs from what made the new one: why results may differ."""
    notes = []
    old_git, new_git = before.get("git") or {}, now.get("git") or {}
    if not old_git:
        notes.append(f"the recorded run names no commit ({before.get('git-unknown', 'recorded before commits were kept')})")
    elif (old_git.get("commit"), old_git.get("diff-sha256")) != (new_git.get("commit"), new_git.get("diff-sha256")):
        notes.append(f"code: {describe_git(old_git)} recorded, {describe_git(new_git)} now")
    old_pk, new_pk = before.get("packages") or {}, now.get("packages") or {}
    names = sorted(set(old_pk) | set(new_pk))
    changed = [f"{k} {old_pk.get(k)} recorded, {new_pk.get(k)} now" for k in names if old_pk.get(k) != new_pk.get(k)]
    if changed:
        notes.append("packages: " + "; ".join(changed))
    if before.get("device") != now.get("device"):
        notes.append(f"device: {before.get('device')} recorded, {now.get('device')} now")
    old_nodes, new_nodes = before.get("nodes") or {}, now.get("nodes") or {}
    data = [p for p in sorted(set(old_nodes) | set(new_nodes)) if digest(old_nodes, p) != digest(new_nodes, p)]
    if data:
        notes.append("data digest differs for partition(s) " + ", ".join(data) + (" (none recorded)" if not old_nodes else ""))
    return notes


def digest(nodes: dict[str, Any], pid: str) -> Any:
    return (nodes.get(pid) or {}).get("data-sha256")


def describe_git(g: dict[str, Any]) -> str:
    if not g:
        return "no commit"
    return f"commit {str(g.get('commit'))[:12]}" + (f" dirty (diff {str(g.get('diff-sha256'))[:12]})" if g.get("dirty") else " clean")


def wire_comparable(run_dir: Path, new: Path, resumed: bool) -> bool:
    """Whether the serialized message sizes can agree: same run-dir length, one start."""
    return not resumed and len(str(run_dir)) == len(str(new))


def compare(run_dir: Path, new: Path, rounds: int, resumed: bool) -> tuple[list[str], str | None]:
    """What differs between the recorded run and the new one (empty: identical), and why model.npz
    was not compared (None: it was)."""
    skip = frozenset() if wire_comparable(run_dir, new, resumed) else WIRE
    old_rows = outcome_rows(run_dir, skip)
    out = [d] if (d := first_row_difference(old_rows[:rounds], outcome_rows(new, skip))) else []
    if rounds < len(old_rows):
        return out, f"model.npz not compared: {rounds} of the recorded {len(old_rows)} rounds replayed"
    if not (run_dir / "model.npz").is_file():
        return out, f"model.npz not compared: {run_dir} holds none"
    arrays = model_differences(run_dir / "model.npz", new / "model.npz")
    if arrays:
        also = f" (also {', '.join(arrays[1:4])})" if len(arrays) > 1 else ""
        out.append(f"model.npz differs in {len(arrays)} array(s), first {arrays[0]!r}{also}")
    return out, None


def reproduce(run_dir: Path, rounds: int | None = None, out: Path | None = None) -> tuple[bool, list[str]]:
    """Run ``run_dir`` again into ``out`` (default: a new sibling folder); (identical, report lines)."""
    from fedapp.sim.run_local import run_local

    run_dir = run_dir.resolve()
    config, before = recorded(run_dir)
    if rounds is not None and rounds < 1:
        raise ConfigError(f"fedapp reproduce: --rounds {rounds} is not allowed: expected a whole number >= 1")
    n = int(config["num-server-rounds"]) if rounds is None else rounds
    target = (out or new_folder(run_dir)).resolve()
    made = run_local({**config, **NOT_REPLAYED, "num-server-rounds": n, "run-dir": str(target)})
    after = read_config_and_provenance(made)[1]
    lines = [f"recorded {run_dir}", f"reproduced {made} ({n} round(s))"]
    resumed = bool(before.get("earlier"))
    diffs, skipped = compare(run_dir, made, n, resumed)
    lines += [skipped] if skipped else []
    if not wire_comparable(run_dir, made, resumed):
        why = "the run was resumed" if resumed else "the run folders' paths differ in length"
        lines.append(f"{', '.join(sorted(WIRE))} not compared: {why} (each message's config names them)")
    notes = provenance_notes(before, after)
    lines += [f"not as recorded: {note}" for note in notes] if notes else ["commit, packages, device and data digests as recorded"]
    lines.append("identical" if not diffs else "differs: " + "; ".join(diffs))
    return not diffs, lines
