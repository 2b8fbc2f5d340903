"""fedapp report's traffic table against hand-computed totals: MB up, down and both (mean ± std
over seeds), the share of the reference group, and the downlink counts under ``selected``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedapp.report.compare import group_runs
from fedapp.report.traffic import has_traffic, traffic_table
from fedapp.server.results import Run


def run(name: str, seed: int, up: list[int], down: list[int], downlink: str = "full", notes: list[dict[str, Any]] | None = None) -> Run:
    rows = []
    for i, (u, d) in enumerate(zip(up, down, strict=True)):
        row: dict[str, Any] = {"round": i + 1, "accuracy": 0.5, "wire_bytes_up": u, "wire_bytes_down": d}
        if notes:
            row["downlink"] = notes[i]
        rows.append(row)
    return Run(Path(f"/runs/{name}-seed{seed}"), {"method": "fedpart", "seed": seed, "downlink": downlink, "cycles": len(name)}, rows)


def test_traffic_table_totals_shares_and_downlink_counts() -> None:
    miss: list[dict[str, Any]] = [
        {"full": {"0": "no model sent yet", "1": "no model sent yet"}, "catch_up": {}, "cache_miss": {}},
        {"full": {"1": "node changed"}, "catch_up": {"0": [1, 3]}, "cache_miss": {"0": "missing"}},
    ]
    runs = [
        run("fnu", 0, [1_000_000, 1_000_000], [2_000_000, 2_000_000]),
        run("fnu", 1, [1_000_000, 3_000_000], [2_000_000, 2_000_000]),
        run("fedpart", 0, [500_000, 500_000], [1_000_000, 500_000], "selected", miss),
    ]
    groups = group_runs(runs)
    assert has_traffic(groups)
    table = traffic_table(groups)
    lines = table.splitlines()
    assert "| total / fnu |" in lines[2]
    fnu, fedpart = lines[4], lines[5]
    # fnu: up 2 and 4 MB (3 ± 1.414), down 4 and 4, both 6 and 8 (7 ± 1.414)
    assert "| 2 | 3.000 ± 1.414 | 4.000 ± 0.000 | 7.000 ± 1.414 | 1.000 | — |" in fnu
    # fedpart: 1 MB up, 1.5 down, 2.5 total = 2.5 / 7 of fnu; one full resend after round 1, one catch-up, one cache-miss
    assert "| selected | 1 | 1.000 | 1.500 | 2.500 | 0.357 | 1, 1, 1 |" in fedpart
