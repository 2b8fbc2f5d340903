"""Run every config in configs/ for two rounds in-process (FedPart: its shortest schedule)
and keep what each run produced, so a refactor can be checked bit for bit against the code
before it.

    PYTHONPATH=. .venv/bin/python scripts/config_snapshot.py run OUT [--only NAME ...] [--set KEY=VALUE ...]
    PYTHONPATH=. .venv/bin/python scripts/config_snapshot.py compare BEFORE AFTER [--new-keys anomaly,...] [--skip-keys mb_total,...]
    PYTHONPATH=. .venv/bin/python scripts/config_snapshot.py run OUT --reproduce [--only NAME ...]

``run`` writes OUT/<config>/metrics.jsonl, model.npz and config.json (``--only`` adds to an
existing OUT, replacing those configs' folders), and OUT/status.json after every config.
Configs that read real datasets get small files generated in the real on-disk formats
(tests/data_files.py); ``--set`` overrides run-config keys in every config (e.g.
``--set client-batch=8`` to check the batched engine); a config whose dataset has no loader here (speech-commands) is
listed as skipped.
``compare`` checks every metrics row without its timing keys (tests/run_rows.py) and every
model array for exact equality, and exits 1 on any difference (fedapp.server.run_compare); ``--skip-keys`` leaves
row keys out where a change alters them on purpose (the wire counters of a change that sends fewer messages).
``--reproduce`` plays each run again with `fedapp reproduce` (into OUT/<config>-again, while the
generated data is still there) and records its verdict in OUT/reproduce.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import tomllib
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedapp.server.run_compare import differing_keys, model_differences, outcome_rows  # noqa: E402
from tests.data_files import write_cifar10, write_cifar100, write_emnist, write_medmnist, write_mnist  # noqa: E402

ROUNDS = 2
# FedPart's rounds must equal its schedule: the shortest one (one warmup round, one cycle of one
# round per layer group) on a tenth of the clients per round; layer groups per model (spec tables)
FEDPART_GROUPS = {"cnn-bn": 6, "resnet8": 10, "resnet18": 21}
FEDPART_SHORT = {"warmup-rounds": 1, "rounds-per-layer": 1, "cycles": 1, "full-rounds-between-cycles": 0, "fraction-train": 0.1}


def write_data(root: Path) -> None:
    """Every real-format source the configs read, big enough for 100 Dirichlet clients of >= 10 samples."""
    write_cifar10(root, 500, 10, seed=1)
    write_cifar100(root, 15, 2, seed=3)
    write_mnist(root, 30, 5, seed=2)
    write_emnist(root, "byclass", 62, 80, 2, seed=4)
    split = {"train": 30, "val": 2, "test": 5}
    write_medmnist(root, "pathmnist", 9, split, rgb=True, seed=5)
    write_medmnist(root, "octmnist", 4, split, seed=6)
    write_medmnist(root, "tissuemnist", 8, split, seed=7)


def configs(only: list[str]) -> list[Path]:
    paths = sorted((ROOT / "configs").rglob("*.toml"))
    return [p for p in paths if not only or p.stem in only or str(p.relative_to(ROOT / "configs")) in only]


def reproduced(out: Path, name: str) -> str:
    """`fedapp reproduce` of OUT/<name> into OUT/<name>-again: "identical" or what differs."""
    from fedapp.sim.reproduce import reproduce

    again = out / f"{name}-again"
    if again.exists():
        shutil.rmtree(again)
    same, lines = reproduce(out / name, out=again)
    print("\n".join(lines), flush=True)
    return lines[-1] if same else " | ".join(lines[2:])


def run_all(out: Path, only: list[str], settings: dict[str, object] | None = None, again: bool = False) -> int:
    from fedapp.core.config import load_toml_config
    from fedapp.sim.run_local import run_local

    out.mkdir(parents=True, exist_ok=True)
    status_file = out / "status.json"
    status: dict[str, str] = json.loads(status_file.read_text()) if only and status_file.exists() else {}
    verdict_file = out / "reproduce.json"
    verdicts: dict[str, str] = json.loads(verdict_file.read_text()) if again and only and verdict_file.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        write_data(data)
        for path in configs(only):
            name = str(path.relative_to(ROOT / "configs").with_suffix("")).replace("/", "__")
            config = load_toml_config(path)
            if config.get("dataset") == "speech-commands":
                status[name] = "skipped: no loader for speech-commands"
                continue
            paths = {"data-root": str(data), "run-dir": str(out / name), "overwrite": True}
            overrides = {**(settings or {}), "num-server-rounds": ROUNDS, **paths}
            if config.get("method") == "fedpart":
                groups = FEDPART_GROUPS[str(config["model"])]
                overrides.update({**FEDPART_SHORT, "num-server-rounds": 1 + groups})
            try:
                run_local({**config, **overrides})
                status[name] = "ok"
                if again:
                    verdicts[name] = reproduced(out, name)
            except Exception as err:  # recorded, so one broken config does not hide the others
                status[name] = f"failed: {type(err).__name__}: {err}"
                traceback.print_exc()
            print(f"{name}: {status[name]}", flush=True)
            status_file.write_text(json.dumps(status, indent=2, sort_keys=True) + "\n")  # kept if the sweep is cut short
            if again:
                verdict_file.write_text(json.dumps(verdicts, indent=2, sort_keys=True) + "\n")
    ok = all(s == "ok" or s.startswith("skipped") for s in status.values())
    return 0 if ok and all(v == "identical" for v in verdicts.values()) else 1


def compare(before: Path, after: Path, new_keys: frozenset[str] = frozenset(), skip: frozenset[str] = frozenset()) -> int:
    """Exit status 1 on any difference; ``new_keys``: row keys the code after added on purpose
    (present only in AFTER's rows), and ``skip``: row keys, left out of the comparison."""
    old = json.loads((before / "status.json").read_text())
    new = json.loads((after / "status.json").read_text())
    bad = 0
    for name in sorted(set(old) | set(new)):
        if old.get(name) != "ok" or new.get(name) != "ok":
            print(f"{name}: status {old.get(name)!r} -> {new.get(name)!r}")
            bad += old.get(name) != new.get(name)
            continue
        diffs = []
        a_rows = outcome_rows(before / name, skip)
        added = {k for k in new_keys if all(k not in a for a in a_rows)}
        b_rows = [{k: v for k, v in row.items() if k not in added} for row in outcome_rows(after / name, skip)]
        if a_rows != b_rows:
            diffs.append(f"metrics differ ({len(a_rows)} vs {len(b_rows)} rows; keys {differing_keys(a_rows, b_rows)})")
        changed = model_differences(before / name / "model.npz", after / name / "model.npz")
        if changed:
            diffs.append(f"model arrays differ: {changed[:5]}")
        print(f"{name}: {'identical' if not diffs else '; '.join(diffs)}")
        bad += bool(diffs)
    print(f"{bad} config(s) differ")
    return 1 if bad else 0


def parse_settings(items: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` pairs, each value read as TOML (so ``8`` is an int and ``"x"`` a string)."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--only", nargs="*", default=[], help="config stems (or paths under configs/) to run")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="run-config override for every config (TOML value)")
    r.add_argument("--reproduce", action="store_true", help="then `fedapp reproduce` each run; verdicts in OUT/reproduce.json")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--new-keys", default="", help="comma list of row keys AFTER added on purpose (ignored where BEFORE lacks them)")
    c.add_argument("--skip-keys", default="", help="comma list of row keys left out of the comparison")
    args = p.parse_args()
    if args.cmd == "run":
        return run_all(args.out.resolve(), args.only, parse_settings(args.set), args.reproduce)
    keys = frozenset(k for k in args.new_keys.split(",") if k)
    return compare(args.before, args.after, keys, frozenset(k for k in args.skip_keys.split(",") if k))


if __name__ == "__main__":
    sys.exit(main())
