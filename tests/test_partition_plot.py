"""`fedapp data plot`: a run's split drawn with Flower Datasets' plot. The adapter hands
Flower exactly the split the run trains on (per-client class counts equal numpy's count
over client_indices), and the command writes the PNG beside the run's config.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedapp.cli import main
from fedapp.core.config import RunConfig, parse
from fedapp.data import client_indices, dataset_for
from fedapp.data.plot import fixed_partitioner


def test_flower_counts_the_runs_own_split() -> None:
    from flwr_datasets.metrics import compute_counts

    cfg = parse(RunConfig, {"num-clients": 5, "partition": "dirichlet", "dirichlet-alpha": 0.3})
    parts = list(client_indices(cfg))
    labels = dataset_for(cfg).y_train
    counts = compute_counts(fixed_partitioner(parts, labels), "label").to_numpy()
    expected = np.stack([np.bincount(labels[p], minlength=10) for p in parts])
    assert np.array_equal(counts, expected)


def test_data_plot_draws_a_run_folders_split(tmp_path: Path, capsys: object) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"dataset": "digits", "num-clients": 4, "partition": "0,1,2|3,4|5,6,7|8,9", "seed": 3}))
    assert main(["data", "plot", str(run)]) == 0
    png = run / "partition.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert main(["data", "plot", str(tmp_path)]) == 2  # no config.json: a one-line error, not a traceback
