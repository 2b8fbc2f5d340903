"""FedPeWS-Fixed (spec §1.4): the warmup with server-assigned neuron blocks instead of learned masks.

Every hidden layer is cut into ``num-clients`` contiguous blocks with numpy.array_split
(sizes differ by at most one, larger blocks first); client i trains block i of every
layer for W rounds. No scores, no diversity term; masked training, masked averaging and
the switch to the base method after W rounds are FedPeWS's; its only key is
``warmup-fraction`` (WarmupParams), so FedPeWS's mask keys are reported as unused, not ignored. With one mask for the whole
round, the shared training loop (train.local_train) does the masked training: forward
masking by activation hooks and the parameter masks as gradient masks; the in-process engine
trains many clients' warm-ups together with ``pews_fixed_kernel.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fedapp.batched.fit import FitCall
from fedapp.batched.seam import park
from fedapp.core.config import RunConfig
from fedapp.core.masks import NeuronLayout, model_param_masks, neuron_layout
from fedapp.core.train import TrainStats
from fedapp.methods.base import ClientJob, ClientPolicy, ClientResult, Method, NodeTask, RecordSpec, Reply, settings_of, train_metrics
from fedapp.methods.fedpews import PeWSServer, WarmupParams, mask_stats
from fedapp.methods.metric_names import WARMUP
from fedapp.methods.pews_fixed_kernel import FixedWarmupCall
from fedapp.methods.pews_train import masks_to_records, records_to_masks

BLOCK = "pews-neuron-mask"


def fixed_blocks(widths: tuple[int, ...], num_clients: int) -> list[np.ndarray]:
    """One flat bool mask over all hidden neurons per client: block i of every layer."""
    out = [np.zeros(sum(widths), bool) for _ in range(num_clients)]
    offset = 0
    for width in widths:
        for i, block in enumerate(np.array_split(np.arange(width), num_clients)):
            out[i][offset + block] = True
        offset += width
    return out


class FixedServer(PeWSServer):
    def __init__(
        self, cfg: RunConfig, params: WarmupParams, initial: dict[str, np.ndarray], node_info: dict[int, dict[str, Any]], model: nn.Module
    ):
        super().__init__(cfg, params, initial, node_info, model)
        self.blocks = fixed_blocks(self.layout.widths, cfg.num_clients)

    def node_task(self, server_round: int, pid: int) -> NodeTask:
        if not self.is_warm(server_round):
            return NodeTask(config={"phase": "full"})
        return NodeTask(config={"phase": "warmup"}, records={BLOCK: masks_to_records(self.blocks[pid], self.layout)})

    def reply_records(self, server_round: int, pid: int) -> dict[str, RecordSpec]:
        return {}  # the server assigned the blocks: replies carry no mask

    def upload_allowed(self, server_round: int, pid: int, task: NodeTask) -> dict[str, np.ndarray] | None:
        """Warm-up: the client's own block (its parameter masks); afterwards the whole model."""
        if not self.is_warm(server_round):
            return None
        return model_param_masks(self.model, self.layout.split(self.blocks[pid]))

    def after_round(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        if not self.is_warm(server_round):
            return {WARMUP: False}
        return {WARMUP: True, **mask_stats([self.blocks[r.pid] for r in replies])}


class FixedClient(ClientPolicy):
    def train(self, job: ClientJob) -> ClientResult:
        if job.config.get("phase") != "warmup":
            return super().train(job)
        layout: NeuronLayout = neuron_layout(job.model)
        mask = records_to_masks(job.records[BLOCK], layout)
        masks = model_param_masks(job.model, layout.split(mask))
        params = dict(job.model.named_parameters())
        grad_masks = job.to_device({n: m for n, m in masks.items() if n in params})
        x, y = job.tensors()
        local = FitCall(
            job.model, x, y, settings_of(self.cfg), job.gen, grad_masks, self.extra_loss(job.model, grad_masks), job.data.augment
        )
        neurons = torch.from_numpy(mask.astype(np.float32)).to(job.device)
        stats: TrainStats = park(FixedWarmupCall(local, layout, neurons))  # one at a time, or batched (pews_fixed_kernel)
        return ClientResult({**train_metrics(stats), "mask-density": float(mask.mean())}, masks=masks)


METHOD = Method("fedpews-fixed", FixedServer, FixedClient, WarmupParams)  # no mask keys: mask-impl & co. do not apply
