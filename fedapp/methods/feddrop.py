"""Random federated dropout baseline: each round a fresh uniform random sub-model at
the client's tier fraction (the same draw as FedSPU's), trained from the global
values; no personal values are kept between rounds. A client is evaluated with the
sub-model it trained last (its personal sub-model; w0 before its first round)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from torch import nn

from fedapp.core.device import host_arrays, load_host_arrays
from fedapp.core.masks import neuron_layout
from fedapp.core.state_rounds import Schema
from fedapp.methods.base import ClientJob, Method, local_test_scores, shaped_like
from fedapp.methods.dropout import SubModelClient
from fedapp.methods.submodel import extract_submodel
from fedapp.methods.tiers import TieredServer, TierParams

MODEL, NEURONS = "model", "neurons"  # state keys: the model after training, the neurons it kept


class FedDropClient(SubModelClient):
    def after_train(self, job: ClientJob, neurons: list[np.ndarray]) -> None:
        names = neuron_layout(job.model).hidden_names
        job.store.save_all(job.pid, {MODEL: host_arrays(job.model.state_dict()), NEURONS: dict(zip(names, neurons, strict=True))})

    def state_schema(self, model: nn.Module, initial: Mapping[str, np.ndarray]) -> Schema:
        return {MODEL: shaped_like(initial)}  # the kept neurons' indices vary in length: finiteness only

    def evaluate(self, job: ClientJob) -> dict[str, float]:
        saved = job.store.load(job.pid, MODEL)
        if not saved:
            load_host_arrays(job.model, job.initial)
            return local_test_scores(job.model, job)
        load_host_arrays(job.model, saved)
        kept = job.store.load(job.pid, NEURONS)
        names = neuron_layout(job.model).hidden_names
        return local_test_scores(extract_submodel(job.model, [kept[n] for n in names])[0], job)


METHOD = Method("feddrop", TieredServer, FedDropClient, TierParams)
