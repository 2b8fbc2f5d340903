"""Client half of the dropout baselines (FjORD, FedDrop): train a physically smaller
sub-model holding only the kept neurons (dropped neurons are absent, not frozen), so
local compute shrinks with p; write it back and upload exactly its entries. The local training
goes through the engine's park point (``local_fit``): clients whose sub-models have the same
shapes (one tier) train batched together under ``client-batch``."""

from __future__ import annotations

import numpy as np

from fedapp.batched.fit import local_fit
from fedapp.methods.base import ClientJob, ClientPolicy, ClientResult, settings_of, train_metrics
from fedapp.methods.submodel import extract_submodel, write_back
from fedapp.methods.tier_client import active_masks, es_metrics, job_neurons
from fedapp.methods.tiers import TierParams


class SubModelClient(ClientPolicy):
    params: TierParams

    def train(self, job: ClientJob) -> ClientResult:
        neurons = job_neurons(job)
        active = active_masks(job, neurons)
        sub, masks = extract_submodel(job.model, neurons)
        x, y = job.tensors()
        stats = local_fit(sub, x, y, settings_of(self.cfg), job.gen, None, self.extra_loss(sub), augment=job.data.augment)
        write_back(job.model, sub, masks)
        self.after_train(job, neurons)
        return ClientResult(metrics={**train_metrics(stats), **es_metrics(sub, job, stats.loss, self.params.es_lambda)}, masks=active)

    def after_train(self, job: ClientJob, neurons: list[np.ndarray]) -> None:
        """Hook: what a client keeps after training (nothing by default)."""
