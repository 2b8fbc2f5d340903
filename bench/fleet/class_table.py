"""Per-class table of docs/results-fleet.md from fleet runs: python bench/fleet/class_table.py RUN..."""

import json
import sys
from pathlib import Path


def main(runs: list[str]) -> None:
    print("| run | class | link MB/node | app MB/node (≈) | CPU s/node | modelled J/node | mean upload-done s | replies lost |")
    print("|---|---|---|---|---|---|---|---|")
    for run in map(Path, runs):
        rows = [json.loads(x) for x in (run / "fleet.jsonl").read_text().splitlines()]
        mets = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        classes = {n["node"]: n["class"] for n in rows[0]["nodes"]}
        for cls in dict.fromkeys(classes.values()):
            ids = [i for i, c in classes.items() if c == cls]
            nodes = [n for r in rows for n in r["nodes"] if n["class"] == cls]
            link = sum(n["bytes_up"] + n["bytes_down"] for n in nodes) / len(ids) / 1e6
            cpu = sum(n["cpu_seconds"] for n in nodes) / len(ids)
            joules = sum(n["modelled_joules"] for n in nodes) / len(ids)
            t90 = sum(n["upload_90_s"] for n in nodes) / len(nodes)
            lost = sum(1 for m in mets for p in m.get("failed_pids", []) if p in ids)
            # app bytes (≈): the server's per-round totals split over the replying clients by active fraction
            app = 0.0
            for m in mets:
                active = {int(k): v for k, v in (m.get("client_active_fraction") or {}).items()}
                active = active or dict.fromkeys(map(int, m["train_seconds"]), 1.0)
                total = sum(active.values()) or 1.0
                app += sum((m["bytes_up"] + m["bytes_down"]) * active[i] / total for i in ids if i in active)
            print(f"| {run.name} | {cls} | {link:.2f} | {app / len(ids) / 1e6:.2f} | {cpu:.0f} | {joules:.0f} | {t90:.0f} | {lost} |")


if __name__ == "__main__":
    main(sys.argv[1:])
