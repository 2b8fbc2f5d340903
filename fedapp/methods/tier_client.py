"""Client helpers of the tiered methods (FedSPU, FjORD, FedDrop): this round's kept neurons
(packed bits or a seed, tiers.py), their parameter masks, and the early-stopping loss."""

from __future__ import annotations

import numpy as np
import torch

from fedapp.core.masks import model_param_masks, neuron_layout
from fedapp.methods.base import ClientJob, local_test_scores
from fedapp.methods.tiers import RECORD, TierParams, random_neurons


def job_neurons(job: ClientJob) -> list[np.ndarray]:
    """The kept neurons the server chose for this client this round (bits or seed)."""
    layout = neuron_layout(job.model)
    if "neuron-seed" in job.config:
        params: TierParams = job.params
        p = float(job.config["active-fraction"])
        return random_neurons(layout.widths, p, int(job.config["neuron-seed"]), params.kept_rounding)
    bits = job.records.get(RECORD)
    if bits is None:  # full model (p >= 0.99): active_masks checks everything was sent
        return [np.ones(w, bool) for w in layout.widths]
    return layout.unpack_neurons(bits, RECORD)


def active_masks(job: ClientJob, neurons: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Parameter masks of the active set; checks the server sent global values for all of it."""
    masks = model_param_masks(job.model, neurons)
    for k, m in masks.items():
        if not job.received[k][m].all():
            raise ValueError(f"server did not send the global values of every active entry of {k}")
    return masks


def es_metrics(model: torch.nn.Module, job: ClientJob, train_loss: float, lam: float) -> dict[str, float]:
    """The local-test loss of the trained model and the early-stopping loss (spec §1.3);
    a client with no local test sample stops on its training loss alone."""
    scores = local_test_scores(model, job)
    if "loss" not in scores:
        return {"es-loss": train_loss}
    val_loss = scores["loss"]
    return {"val-loss": val_loss, "es-loss": lam * train_loss + (1 - lam) * val_loss}
