"""FedSPU: stochastic parameter update on personal full models (Niu et al. 2024).

Each round a client writes the global values into its active entries (kept neurons
of every hidden layer, chosen by the server at its tier's fraction p), keeps its own
values in the frozen entries, trains the *full* model with frozen gradients masked
out, and uploads only the active entries. The whole trained model is its new
personal model (disk store). It reports lambda*L_train + (1-lambda)*L_val for early
stopping. Frozen neurons still run forward and carry the gradient back to earlier active
neurons, but their own gradients are not computed in a CNN (core/partial_backward.py),
so a step costs less at smaller p (docs/results-fedspu.md measures this).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import torch

from fedapp.batched.memory import ClientMemory
from fedapp.core.device import host_arrays, load_host_arrays
from fedapp.core.state_rounds import Schema
from fedapp.core.train import TrainSettings
from fedapp.methods.base import ClientJob, ClientPolicy, ClientResult, Method, local_test_scores, shaped_like, train_metrics
from fedapp.methods.tier_client import active_masks, es_metrics, job_neurons
from fedapp.methods.tiers import TieredServer, TierParams

PERSONAL_MODEL = "personal-model"  # state key: the client's whole trained model (its personal model)


def merge(model: torch.nn.Module, personal: dict[str, np.ndarray], active: dict[str, np.ndarray]) -> None:
    """Active entries keep the global values already in ``model``; all else is personal."""
    current = host_arrays(model.state_dict())
    load_host_arrays(model, {k: np.where(active[k], v, personal[k]) if k in active else personal[k] for k, v in current.items()})


class FedSPUClient(ClientPolicy):
    params: TierParams

    def chunk_memory(self) -> ClientMemory:
        return dataclasses.replace(super().chunk_memory(), mask_sets=1)  # its active neurons' gradient masks

    def train_settings(self) -> TrainSettings:
        """Frozen neurons skip their gradients (core/partial_backward.py): the same model, bit for
        bit, as masking a full backward, at a cost that falls with p."""
        return dataclasses.replace(super().train_settings(), partial_backward=True)

    def train(self, job: ClientJob) -> ClientResult:
        active = active_masks(job, job_neurons(job))
        merge(job.model, job.store.load(job.pid, PERSONAL_MODEL) or dict(job.initial), active)
        params = dict(job.model.named_parameters())
        stats = self.fit(job, job.to_device({k: m for k, m in active.items() if k in params}))
        job.store.save(job.pid, PERSONAL_MODEL, host_arrays(job.model.state_dict()))
        return ClientResult(metrics={**train_metrics(stats), **es_metrics(job.model, job, stats.loss, self.params.es_lambda)}, masks=active)

    def state_schema(self, model: torch.nn.Module, initial: Mapping[str, np.ndarray]) -> Schema:
        return {PERSONAL_MODEL: shaped_like(initial)}

    def evaluate(self, job: ClientJob) -> dict[str, float]:
        """The stored personal model (w0 if never selected) on the local test split."""
        personal = job.store.load(job.pid, PERSONAL_MODEL)
        load_host_arrays(job.model, personal or job.initial)
        return local_test_scores(job.model, job)


METHOD = Method("fedspu", TieredServer, FedSPUClient, TierParams)
