"""What a deployed round costs each device: fedapp's warm ClientApp runtime against Flower's process
per message, in one run, on the same seeds.

A real deployment on loopback (`fedapp deploy superlink` behind its proxy, TLS, node keys, and 2
SuperNodes started by `fedapp deploy supernode --runtime R`), each node with everything it starts
(SuperNode, runtime, every ClientApp process) in a cgroup of its own, so the kernel counts its CPU
seconds (cpuacct) and its peak memory (memory.max_usage_in_bytes). For each runtime, FedAvg and
FjORD run for ROUNDS rounds on the fleet's run-config (bench/fleet/common.toml: digits, the CNN,
2 local epochs); for FjORD node 0 trains the full width (active-fraction 1.0), node 1 a fifth (0.2).
A one-round FedAvg run before them loads the app bundle on every node (a cost paid once per app
version, by either runtime) and is not measured.

Per node and run it prints: messages (train, evaluate) per round, CPU seconds per round, the
training loop's seconds per round (the clients' own `train_seconds`), the overhead per message
((CPU - training) / messages), peak memory, and round wall; then whether the two runtimes gave
bit-identical rows (timing keys aside) and model.npz. Root, Linux, cgroup v1 (cpuacct, memory).

    PYTHONPATH=. .venv/bin/python bench/warm_runtime.py [--rounds 3] [--methods fedavg fjord] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedapp.fleet import cgroups  # noqa: E402
from tests.deploy_harness import Federation, rows  # noqa: E402
from tests.run_rows import outcome_rows  # noqa: E402

PREFIX = f"fedappwarm{os.getpid()}n"
FRACTIONS = (1.0, 0.2)  # node 0, node 1


def run_config(method: str, rounds: int, run_dir: Path) -> dict[str, Any]:
    common = tomllib.loads((ROOT / "bench/fleet/common.toml").read_text())
    return {**common, "num-clients": 2, "num-server-rounds": rounds, "method": method, "run-dir": str(run_dir), "round-timeout": 300.0}


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def long_lived(i: int) -> dict[str, float]:
    """CPU seconds so far of node ``i``'s long-lived processes, by role (the rest of its cgroup's are
    the per-message processes)."""
    out: dict[str, float] = {}
    for pid in cgroups.procs(f"{PREFIX}{i}"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            role = next((r for r in ("flower-supernode", "warm_runtime", "flower-superexec", "deploy supernode") if r in cmd), None)
            if role is not None:
                out[role] = out.get(role, 0.0) + process_cpu(pid)
        except OSError:
            continue
    return out


def memory_peak(i: int) -> int:
    return int((cgroups.path("memory", f"{PREFIX}{i}") / "memory.max_usage_in_bytes").read_text())


def reset_memory_peak(i: int) -> None:
    (cgroups.path("memory", f"{PREFIX}{i}") / "memory.max_usage_in_bytes").write_text("0")


def measure(runtime: str, methods: list[str], rounds: int, out: Path) -> dict[str, dict[str, Any]]:
    """One federation with ``runtime``; each method's run measured per node."""
    tmp = Path(tempfile.mkdtemp(prefix=f"warm-bench-{runtime}-"))
    for i in range(2):
        cgroups.create(f"{PREFIX}{i}", cpu_share=2.0, memory_mb=None)  # a quota of both cores: accounting, no limit
    args = {i: ["--active-fraction", str(p)] for i, p in enumerate(FRACTIONS)}
    fed = Federation(tmp, 2, runtime=runtime, node_args=args, cgroup_prefix=PREFIX)
    results: dict[str, dict[str, Any]] = {}
    try:
        fed.start()
        # a first run loads the app bundle (both runtimes write it to disk, the warm one also makes its template):
        # a one-time cost a deployment pays once per app version, left out of the measured runs
        fed.run(run_config("fedavg", 1, out / f"warmup-{runtime}"), "run-warmup")
        for method in methods:
            run_dir = out / f"{method}-{runtime.replace('flower', 'flwr')}"  # names of one length: the run-dir is in every message
            cpu0 = [cgroups.cpu_seconds(f"{PREFIX}{i}") for i in range(2)]
            roles0 = [long_lived(i) for i in range(2)]
            for i in range(2):
                reset_memory_peak(i)
            t0 = time.monotonic()
            log = fed.run(run_config(method, rounds, run_dir), f"run-{method}")
            wall = time.monotonic() - t0
            got = rows(run_dir)
            if len(got) != rounds:  # said, not hidden: a run the machine's load broke is left out of the table
                print(f"{method} under {runtime}: {len(got)} of {rounds} rounds; log tail:\n{log[-1500:]}", flush=True)
                continue
            cpu = [cgroups.cpu_seconds(f"{PREFIX}{i}") - cpu0[i] for i in range(2)]
            roles = [{k: v - roles0[i].get(k, 0.0) for k, v in long_lived(i).items()} for i in range(2)]
            results[method] = {
                "run_dir": run_dir, "wall": wall, "rows": got, "cpu": cpu, "peak": [memory_peak(i) for i in range(2)], "roles": roles
            }  # fmt: skip
    finally:
        fed.stop()
        for i in range(2):
            for pid in cgroups.procs(f"{PREFIX}{i}"):  # nothing may be left: the bench fails loudly if something is
                print(f"warning: pid {pid} still in {PREFIX}{i}", file=sys.stderr)
            cgroups.remove(f"{PREFIX}{i}")
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def messages(row: dict[str, Any], pid: str) -> tuple[float, float]:
    """(train, evaluate) messages node ``pid`` answered in this round: the row's own count of evaluate
    messages (one message per client and round sends them only where a score is missing), shared over
    the nodes, else (rows written before that count) one per node in a personalised evaluation round."""
    train = 1.0 if pid in (row.get("train_seconds") or {}) else 0.0
    if "messages" in row:
        return train, row["messages"]["evaluate"] / len(FRACTIONS)
    return train, 1.0 if (row.get("evaluated_clients") or 0) > 0 else 0.0


def node_table(runtime: str, method: str, r: dict[str, Any]) -> list[dict[str, Any]]:
    n = len(r["rows"])
    out = []
    for i in range(2):
        pid = str(i)
        train_s = sum(float((row.get("train_seconds") or {}).get(pid, 0.0)) for row in r["rows"])
        msgs = [messages(row, pid) for row in r["rows"]]
        n_msgs = sum(a + b for a, b in msgs)
        out.append({
            "runtime": runtime, "method": method, "node": i, "p": FRACTIONS[i] if method == "fjord" else 1.0,
            "train_msgs_per_round": sum(a for a, _ in msgs) / n, "eval_msgs_per_round": sum(b for _, b in msgs) / n,
            "cpu_s_per_round": r["cpu"][i] / n, "train_s_per_round": train_s / n,
            "overhead_s_per_message": (r["cpu"][i] - train_s) / n_msgs, "peak_mb": r["peak"][i] / 2**20,
            "round_wall_s": sum(float(row["seconds"]) for row in r["rows"]) / n,
            **{f"{role}_s_per_round": v / n for role, v in sorted(r["roles"][i].items())},
        })  # fmt: skip
    return out


def identical(a: Path, b: Path) -> str:
    if outcome_rows(a) != outcome_rows(b):
        return "rows differ"
    with np.load(a / "model.npz") as ma, np.load(b / "model.npz") as mb:
        if sorted(ma.files) != sorted(mb.files) or any(not np.array_equal(ma[k], mb[k]) for k in ma.files):
            return "model.npz differs"
    return "identical"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--methods", nargs="+", default=["fedavg", "fjord"])
    p.add_argument("--runtimes", nargs="+", choices=("flower", "warm"), default=["flower", "warm"])
    p.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="warm-bench-runs-")))
    args = p.parse_args()
    if (problem := cgroups.unavailable()) is not None:
        raise SystemExit(problem)
    args.out = args.out.resolve()
    table: list[dict[str, Any]] = []
    by_runtime = {}
    for runtime in args.runtimes:
        by_runtime[runtime] = measure(runtime, args.methods, args.rounds, args.out)
        for method in args.methods:
            if method in by_runtime[runtime]:
                table += node_table(runtime, method, by_runtime[runtime][method])
    cols = list(dict.fromkeys(k for line in table for k in line))
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for line in table:
        cells = [line.get(c, "-") for c in cols]
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in cells) + " |")
    for method in args.methods:
        if method not in by_runtime.get("flower", {}) or method not in by_runtime.get("warm", {}):
            continue
        f, w = by_runtime["flower"][method], by_runtime["warm"][method]
        cpu_ratio = sum(w["cpu"]) / sum(f["cpu"])
        print(f"{method}: warm / flower node CPU {cpu_ratio:.3f}; {identical(f['run_dir'], w['run_dir'])} (rows and model.npz)")
    warm = by_runtime.get("warm", {})
    if "fedavg" in warm and "fjord" in warm:
        n = args.rounds
        fj, fa = sum(warm["fjord"]["cpu"]) / 2 / n, sum(warm["fedavg"]["cpu"]) / 2 / n
        print(f"warm: FjORD CPU per node per round {fj:.3f} s / FedAvg's {fa:.3f} s = {fj / fa:.3f}")
        low, full = warm["fjord"]["cpu"][1] / n, warm["fjord"]["cpu"][0] / n
        print(f"warm: FjORD node 1 (p=0.2) {low:.3f} s vs node 0 (p=1.0) {full:.3f} s per round")
    (args.out / "warm_runtime.json").write_text(json.dumps(table, indent=1))
    print(f"runs and table: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
