"""The report's figure and notes: per-round seed bands equal a mean/std computed here with
numpy, the legend is capped, the table explains its cells, and the provenance section
names the folders, the keys on which groups differ and a recorded code version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.report.compare import group_runs, load_runs, report
from fedapp.report.plot import LEGEND_CAP, band, legend_labels, metric


def write_run(folder: Path, config: dict[str, Any], accs: list[float]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    rows = [{"round": r + 1, "accuracy": a, "bytes_up": 100 * (r + 1), "bytes_down": 50, "seconds": 0.1} for r, a in enumerate(accs)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_band_is_the_per_round_mean_and_sample_std_over_seeds(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    curves = [rng.random(6).tolist(), rng.random(6).tolist(), rng.random(4).tolist()]  # the last seed stopped early
    runs = [write_run(tmp_path / f"a-seed{s}", {"method": "fedavg", "seed": s}, c) for s, c in enumerate(curves)]
    (group,) = group_runs(load_runs(runs)).values()
    b = band(group, metric("accuracy"))
    assert b.rounds == [1, 2, 3, 4, 5, 6]
    for i, rnd in enumerate(b.rounds):
        vals = np.array([c[rnd - 1] for c in curves if len(c) >= rnd])
        assert b.count[i] == vals.size
        assert np.isclose(b.mean[i], vals.mean(), rtol=0, atol=1e-12)
        assert np.isclose(b.std[i], vals.std(ddof=1), rtol=0, atol=1e-12)


def test_a_single_seed_has_no_band(tmp_path: Path) -> None:
    (group,) = group_runs(load_runs([write_run(tmp_path / "one", {"seed": 0}, [0.5, 0.7])])).values()
    b = band(group, metric("accuracy"))
    assert b.mean == [0.5, 0.7] and b.std == [0.0, 0.0]


def test_the_legend_names_at_most_the_cap_and_says_how_many_it_leaves_out() -> None:
    names = [f"g{i}" for i in range(LEGEND_CAP + 7)]
    assert legend_labels(names[:LEGEND_CAP]) == names[:LEGEND_CAP]
    capped = legend_labels(names)
    assert capped[:LEGEND_CAP] == names[:LEGEND_CAP] and capped[-1] == "… 7 more groups (report.md)" and len(capped) == LEGEND_CAP + 1


def test_report_explains_cells_and_records_provenance(tmp_path: Path) -> None:
    runs = []
    for name, lr in (("fast", 0.1), ("slow", 0.01)):
        for s in (0, 1):
            cfg = {"method": "fedavg", "lr": lr, "seed": s, "num-clients": 2, "target-accuracy": 0.8}
            git = {"commit": "abc1234def5678", "dirty": name == "slow"}  # as fedapp.server.provenance.collect records it
            cfg["provenance"] = {"git": git, "packages": {"fedapp": "0.1.0"}, "started": f"2026-01-0{s + 1}"}  # never splits a group
            runs.append(write_run(tmp_path / "grid" / f"{name}-seed{s}", cfg, [0.5, 0.9] if name == "fast" else [0.3, 0.4]))
    md, png = report(runs, tmp_path / "out")
    assert png.stat().st_size > 0
    assert "×: no seed reaches it" in md and "| slow | fedavg | 2 |" in md and "| × |" in md
    assert "Run folders (under `grid/`)" in md
    assert "- fast (seeds 0, 1): `fast-seed0`, `fast-seed1`" in md
    assert "| group | lr |\n|---|---|\n| fast | 0.1 |\n| slow | 0.01 |" in md  # only the key that differs
    assert "Code: fedapp 0.1.0; git abc1234def56; git abc1234def56 with local changes." in md
    assert (tmp_path / "out" / "report.md").read_text().startswith(md)


def test_a_key_a_group_never_reads_shows_as_a_dash(tmp_path: Path) -> None:
    """FedAvg records proximal-mu (a shared key) but never reads it: the demo's FedAvg-vs-FedProx
    table shows — there, not FedAvg's unused 0.01; with FedProx as FedPeWS's base the key counts."""
    groups = {
        "fedavg": {"method": "fedavg", "base": "fedavg", "proximal-mu": 0.01},
        "fedprox": {"method": "fedprox", "base": "fedavg", "proximal-mu": 0.1},
        "pews-prox": {"method": "fedpews", "base": "fedprox", "proximal-mu": 0.05},
    }
    runs = [write_run(tmp_path / name, {**cfg, "seed": 0}, [0.5]) for name, cfg in groups.items()]
    md, _ = report(runs, tmp_path / "out")
    table = "| group | base | method | proximal-mu |\n|---|---|---|---|\n"
    assert table + "| fedavg | fedavg | fedavg | — |\n| fedprox | fedavg | fedprox | 0.1 |\n| pews-prox | fedprox | fedpews | 0.05 |" in md
    same = [
        write_run(tmp_path / "b" / n, {"method": "fedavg", "partition": part, "proximal-mu": mu, "seed": 0}, [0.5])
        for n, part, mu in (("x", "0,1|2,3", 0.01), ("y", "iid", 0.5))
    ]
    md, _ = report(same, tmp_path / "out-b")
    assert "| group | partition |\n|---|---|\n| x | 0,1\\|2,3 |\n| y | iid |" in md  # an unread key is no column; | escaped
