"""A run's federated split drawn with Flower Datasets' ``plot_label_distributions``: samples
of each class per client (``fedapp data plot``).

The split is recomputed from the run-config exactly as the server and clients compute
it (fedapp.data.client_indices), whichever partition kind made it (Flower's
partitioners, explicit class groups, shards, sources), and handed to Flower's plot
through a partitioner that serves those fixed index lists.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.core.config import RunConfig
from fedapp.data import client_indices, dataset_for
from fedapp.data.flower_datasets import partitioner_module

HEATMAP_FROM = 30  # clients: a bar per client stops being readable


def fixed_partitioner(parts: list[np.ndarray], labels: np.ndarray) -> Any:
    """A Flower ``Partitioner`` whose partition i is ``parts[i]`` of a one-column label dataset."""
    import datasets

    base = partitioner_module().Partitioner

    class Fixed(base):  # type: ignore[misc,valid-type]
        @property
        def num_partitions(self) -> int:
            return len(parts)

        def load_partition(self, partition_id: int) -> Any:
            return self.dataset.select(parts[partition_id])

    partitioner = Fixed()
    partitioner.dataset = datasets.Dataset.from_dict({"label": labels})
    return partitioner


def plot_split(cfg: RunConfig, out: Path, kind: str = "auto") -> Path:
    """Draw the run's split (classes per client, absolute counts) to ``out`` (PNG)."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # read when flwr_datasets' telemetry loads; we run offline
    from fedapp.core.extras import require

    require("matplotlib", "the split plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    partitioner_module()  # flwr_datasets registered with its __init__ deferred, before the plotting module loads
    from flwr_datasets.visualization import plot_label_distributions

    parts = [np.asarray(p) for p in client_indices(cfg)]
    labels = dataset_for(cfg).y_train
    plot_type = ("heatmap" if len(parts) >= HEATMAP_FROM else "bar") if kind == "auto" else kind
    fig, ax, _ = plot_label_distributions(
        fixed_partitioner(parts, labels),
        label_name="label",
        plot_type=plot_type,
        size_unit="absolute",
        partition_id_axis="x",
        legend=True,
        legend_title="class" if plot_type == "bar" else "samples",
        verbose_labels=False,
        title=f"{cfg.dataset}: {cfg.partition} split over {len(parts)} clients (training samples per class)",
    )
    ax.set_xlabel("client (partition-id)")
    ax.set_ylabel("training samples" if plot_type == "bar" else "class")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out
