"""The largest honest step ratio: how far honest replies and aggregates move a weight, in units
of the step bound's scale (docs/faults.md, "Why 10^4 for the step bound").

    PYTHONPATH=. nice .venv/bin/python bench/honest_step_ratio.py OUT [--only NAME ...]

Runs every config in configs/ as ``scripts/config_snapshot.py run`` does (two rounds, FedPart its
shortest schedule, small generated files for the real datasets) and watches the server's own
checks: each reply's ratio is max |sent entry - global entry| / scale, computed exactly as
``reply_checks.reply_step`` does just before it is called; each aggregate's is
max |aggregate - global| / scale over the same tensors, taken when ``reply_checks.aggregate_fault``
sees it. Prints one line per config and the largest of each, and writes OUT/step_ratio.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import config_snapshot  # noqa: E402

from fedapp.server import reply_checks  # noqa: E402

seen: dict[str, float] = {"reply": 0.0, "aggregate": 0.0}
current: dict[str, Any] = {}  # the global model and scales of the round being checked


def watch() -> None:
    step, fault = reply_checks.reply_step, reply_checks.aggregate_fault

    def reply_step(contribution: Any, global_np: dict[str, np.ndarray], scale: dict[str, float]) -> float:
        current.update(global_np=global_np, scale=scale)
        ratio = step(contribution, global_np, scale)
        seen["reply"] = max(seen["reply"], ratio)
        return ratio

    def aggregate_fault(new: dict[str, np.ndarray]) -> str | None:
        if current:
            g, scale = current["global_np"], current["scale"]
            ratios = [float(np.abs(new[k] - g[k]).max(initial=0.0)) / s for k, s in scale.items() if k in new]
            seen["aggregate"] = max([seen["aggregate"], *ratios])
        return fault(new)

    reply_checks.reply_step, reply_checks.aggregate_fault = reply_step, aggregate_fault  # strategy calls checks.<name>


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--only", nargs="*", default=[], help="config stems (or paths under configs/) to run")
    args = p.parse_args()
    watch()
    out = args.out.resolve()
    found: dict[str, dict[str, float]] = {}
    for path in config_snapshot.configs(args.only):
        name = str(path.relative_to(ROOT / "configs"))
        seen.update(reply=0.0, aggregate=0.0)
        current.clear()
        config_snapshot.run_all(out, [name])
        status = json.loads(path.read_text()) if (path := out / "status.json").exists() else {}
        state = status.get(str(Path(name).with_suffix("")).replace("/", "__"), "skipped (no loader)")  # a skip is not written
        if state != "ok":  # skipped or failed: no ratio to report
            print(f"  {name}: {state}", flush=True)
            continue
        found[name] = dict(seen)
        print(f"  {name}: reply {seen['reply']:.3f}, aggregate {seen['aggregate']:.3f}", flush=True)
    status = json.loads((out / "status.json").read_text())
    for kind in ("reply", "aggregate"):
        name = max(found, key=lambda n: found[n][kind])
        print(f"largest honest {kind} ratio: {found[name][kind]:.3f} ({name}); bound {reply_checks.MAX_STEP:g}")
    (out / "step_ratio.json").write_text(json.dumps({"ratios": found, "status": status}, indent=2, sort_keys=True) + "\n")
    return 0 if all(s == "ok" or s.startswith("skipped") for s in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
