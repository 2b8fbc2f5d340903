"""FjORD baseline (spec §1.5, S19): a tier-p client always trains the leftmost
max(1, floor(p*width)) neurons of every hidden layer (ordered dropout at a fixed
width), averaged per parameter over contributors; it is evaluated with the global
sub-model of its width on its local test split, as in the FedSPU paper's Table 1."""

from __future__ import annotations

import numpy as np

from fedapp.core.masks import neuron_layout
from fedapp.methods.base import ClientJob, Method, local_test_scores
from fedapp.methods.dropout import SubModelClient
from fedapp.methods.submodel import extract_submodel
from fedapp.methods.tiers import TieredServer, TierParams, leftmost_neurons


class FjORDServer(TieredServer):
    score_kind = "received"  # the new global sub-model of its width
    eval_score_stands = False

    def eval_download(self, server_round: int, pid: int) -> dict[str, np.ndarray] | None:
        """The sub-model of its width, as its train message carries it."""
        return self.node_task(server_round, pid).download_masks

    def neurons(self, server_round: int, pid: int) -> list[np.ndarray]:
        return leftmost_neurons(self.layout.widths, self.p[pid], self.params.kept_rounding)


class FjORDClient(SubModelClient):
    def evaluate(self, job: ClientJob) -> dict[str, float]:
        p = float(job.config["active-fraction"])
        neurons = leftmost_neurons(neuron_layout(job.model).widths, p, self.params.kept_rounding)
        return local_test_scores(extract_submodel(job.model, neurons)[0], job)


METHOD = Method("fjord", FjORDServer, FjORDClient, TierParams)
