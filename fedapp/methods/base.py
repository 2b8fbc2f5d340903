"""The two halves of a method, and the default (FedAvg) behaviour of each.

A method is a server policy (which clients train, what each one is sent, how
replies are weighted, what is remembered between rounds) and a client policy (what
trains, what is uploaded, what extra loss, what state persists), registered as a
``Method`` (fedapp.methods.registry). Neither touches wire encoding, Flower plumbing or data
loading (strategy.py and client.py do); the metrics a server policy returns from
``after_round`` are its own namespace in metrics.jsonl and may not reuse a core key.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from fedapp.batched.fit import local_fit
from fedapp.batched.memory import ClientMemory
from fedapp.core.aggregate import Contribution
from fedapp.core.config import RunConfig
from fedapp.core.state import StateStore
from fedapp.core.state_rounds import Schema
from fedapp.core.train import ExtraLoss, TrainSettings, TrainStats, proximal_term
from fedapp.data import ClientData
from fedapp.data.on_device import ClientTensors
from fedapp.methods.proximal import uses_prox

Scalar = bool | int | float | str
CPU = torch.device("cpu")
RecordSpec = dict[str, tuple[tuple[int, ...], str]]  # array name -> (shape, dtype name) a reply record must have


@dataclass
class NodeTask:
    """What the server sends one client this round, besides the global arrays."""

    config: dict[str, Scalar] = field(default_factory=dict)
    records: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # extra ArrayRecords by name
    download_masks: dict[str, np.ndarray] | None = None  # send only these global entries (None: all)


@dataclass
class Reply:
    """A decoded, validated client reply as the server policy sees it."""

    pid: int
    contribution: Contribution
    metrics: dict[str, float]
    records: dict[str, dict[str, np.ndarray]]


@dataclass
class ClientJob:
    """Everything a client policy needs for one round."""

    cfg: RunConfig
    params: Any
    pid: int
    server_round: int
    config: dict[str, Scalar]
    records: dict[str, dict[str, np.ndarray]]
    model: nn.Module  # global values already loaded (where they were sent), on ``device``
    initial: Mapping[str, np.ndarray]  # w0 as host arrays (read-only), the process model's: no rebuild per message
    received: dict[str, np.ndarray]  # bool masks of the global entries that were sent (all True when dense)
    data: ClientData | ClientTensors  # host arrays, or tensors already on ``device``
    store: StateStore
    gen: torch.Generator  # CPU generator of every random draw (shuffling, masks, augmentation)
    device: torch.device = CPU  # chosen once per process (fedapp.core.device); never picked here

    def tensors(self, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        x, y = (self.data.x_train, self.data.y_train) if split == "train" else (self.data.x_test, self.data.y_test)
        return on(x, self.device), on(y, self.device)

    def to_device(self, masks: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """Host (wire or state store) masks as tensors on the job's device."""
        return {n: torch.from_numpy(m).to(self.device) for n, m in masks.items()}


def shaped_like(arrays: Mapping[str, np.ndarray], names: Iterable[str] | None = None) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """A state record's declaration (``ClientPolicy.state_schema``): the names, shapes and dtypes of ``arrays``."""
    return {n: (arrays[n].shape, arrays[n].dtype) for n in (arrays if names is None else names)}


def on(a: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    return (torch.from_numpy(a) if isinstance(a, np.ndarray) else a).to(device)


@dataclass
class ClientResult:
    """What a client policy hands back after training."""

    metrics: dict[str, float]
    masks: dict[str, np.ndarray] | None = None  # upload masks per tensor; None: everything dense
    upload: set[str] | None = None  # which tensors to upload; None: every float tensor
    records: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # extra ArrayRecords


@dataclass(frozen=True)
class Method:
    """What a method module exports as ``METHOD`` (and the registry names): its two halves and
    the frozen dataclass of its own run-config keys (None: it has none)."""

    name: str
    server: type[ServerPolicy]
    client: type[ClientPolicy]
    params: type | None = None


def settings_of(cfg: RunConfig) -> TrainSettings:
    return TrainSettings(
        epochs=cfg.local_epochs, steps=cfg.local_steps, batch_size=cfg.batch_size, lr=cfg.lr,
        optimizer=cfg.optimizer, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
    )  # fmt: skip


class ServerPolicy:
    """FedAvg's server half: sample ``fraction-train`` of the clients, send everyone
    the same config, weight by ``client-weighting``, never stop early."""

    personalized_eval = False
    eval_records: frozenset[str] = frozenset()  # reply records that serve evaluation only: counted in bytes_up_eval, not bytes_up
    # What a client's personalised score measures (fedapp.server.scores): "received", the model the
    # round leaves it (it changes every round: scored when the next round's message brings it);
    # "trained", its own model as its last local training left it (scored in its train reply, and
    # it stands until the client trains again).
    score_kind = "received"
    eval_score_stands = False  # "trained": an evaluate reply's score also stands until the client trains (no fallback to the global model)

    def __init__(
        self, cfg: RunConfig, params: Any, initial: dict[str, np.ndarray], node_info: dict[int, dict[str, Scalar]], model: nn.Module
    ):
        """``initial``: w0 as host arrays; ``node_info``: each partition's discovery facts; ``model``:
        the server's built model (its structure: neuron layout, layer groups, buffers), never rebuilt
        here. A policy reads it and never trains it (the server evaluates with it)."""
        self.cfg, self.params, self.initial, self.node_info, self.model = cfg, params, initial, node_info, model

    @classmethod
    def check_config(cls, cfg: RunConfig, params: Any) -> None:
        """Raise ConfigError for keys this method cannot run with (called at server start,
        before discovery); FedAvg has nothing beyond the per-key checks."""

    def reply_records(self, server_round: int, pid: int) -> dict[str, RecordSpec]:
        """The extra ArrayRecords a train reply from ``pid`` may carry this round, with each
        array's shape and dtype; any other record makes the reply a failure before it is decoded."""
        return {}

    def upload_allowed(self, server_round: int, pid: int, task: NodeTask) -> dict[str, np.ndarray] | None:
        """The entries a train reply from ``pid`` may cover, given the ``task`` it was sent: bool masks
        shaped like each tensor, a tensor not named may not be sent at all; None: any float tensor.
        By default what was sent is what may come back (FedSPU/FjORD/FedDrop's sub-model, the global
        part of a personalised client); a method whose clients train less than they receive says so."""
        return task.download_masks

    def check_records(self, server_round: int, pid: int, records: dict[str, dict[str, np.ndarray]]) -> None:
        """Raise ValueError if the values of a reply's method records (decoded, of the declared
        shapes and dtypes, finite) cannot be what an honest client sends: the reply is that node's failure."""

    def select(self, server_round: int, pids: list[int], rng: random.Random) -> list[int]:
        k = max(1, round(self.cfg.fraction_train * len(pids)))
        return sorted(rng.sample(pids, min(k, len(pids))))

    def node_task(self, server_round: int, pid: int) -> NodeTask:
        return NodeTask()

    def eval_config(self, server_round: int, pid: int) -> dict[str, Scalar]:
        """Per-node config of the personalised-evaluation message (e.g. the node's width)."""
        return {}

    def eval_download(self, server_round: int, pid: int) -> dict[str, np.ndarray] | None:
        """The global entries a personalised evaluation of ``pid`` reads (None: the whole model):
        what its evaluate message carries, and what its train message must carry for it to score
        the received model there instead."""
        return None

    def weight(self, metrics: dict[str, float]) -> float:
        return 1.0 if self.cfg.client_weighting == "uniform" else float(metrics.get("num-examples", 0))

    def server_lr(self, server_round: int) -> float:
        return self.cfg.server_lr

    def after_round(self, server_round: int, replies: list[Reply]) -> dict[str, Any]:
        """Update server-side method state; return extra metrics for metrics.jsonl."""
        return {}

    def finished(self, server_round: int) -> bool:
        return False

    def state(self) -> dict[str, np.ndarray]:
        """Server-side method state to checkpoint each round (e.g. last masks, stopped
        clients), so ``resume=true`` continues exactly; FedAvg keeps none."""
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what ``state()`` returned at the checkpointed round."""

    def eval_arrays(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The arrays the server evaluates on the global test set (FedPart swaps in a
        reference client's BatchNorm statistics here)."""
        return arrays


class ClientPolicy:
    """FedAvg's client half (FedProx when the run uses the proximal term): train the
    whole model for the configured local work, upload every float tensor dense."""

    trains_local_epochs = True  # False: the method's own key sets its local passes (FedSelect: local-alt-epochs)

    def __init__(self, cfg: RunConfig, params: Any):
        self.cfg, self.params = cfg, params

    def chunk_memory(self) -> ClientMemory:
        """What this client holds in a batched chunk beyond FedAvg's (``client-batch = auto`` sizes by it)."""
        return ClientMemory(anchor=uses_prox(self.cfg))

    def extra_loss(self, model: nn.Module, masks: dict[str, torch.Tensor] | None = None) -> ExtraLoss | None:
        if not uses_prox(self.cfg):
            return None
        anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
        return proximal_term(self.cfg.proximal_mu, anchor, masks)

    def fit(self, job: ClientJob, grad_masks: dict[str, torch.Tensor] | None = None) -> TrainStats:
        """The local-training step of ``train``: ``local_train`` through the engine's park point
        (``batched.fit.local_fit``); what comes before and after stays per client."""
        x, y = job.tensors()
        extra = self.extra_loss(job.model, grad_masks)
        return local_fit(job.model, x, y, self.train_settings(), job.gen, grad_masks, extra, augment=job.data.augment)

    def train_settings(self) -> TrainSettings:
        """The local training of ``fit``: the run-config's (FedSPU adds its partial backward)."""
        return settings_of(self.cfg)

    def train(self, job: ClientJob) -> ClientResult:
        stats = self.fit(job)
        return ClientResult(metrics=train_metrics(stats))

    def evaluate(self, job: ClientJob) -> dict[str, float]:
        """Accuracy of the model the client would use, on its local test split."""
        return local_test_scores(job.model, job)

    def state_schema(self, model: nn.Module, initial: Mapping[str, np.ndarray]) -> Schema:
        """Per state key the arrays (name -> shape, dtype) this method's records must hold: a stored
        record that differs is refused before use (fedapp.core.state_rounds); undeclared records are
        checked for finiteness only. FedAvg keeps no state."""
        return {}


def local_test_scores(model: nn.Module, job: ClientJob) -> dict[str, float]:
    """Accuracy and loss of ``model`` on the client's local test split. On an empty split only
    ``num-examples`` (0): a metric over zero samples is never reported as a number."""
    from fedapp.core.evaluate import evaluate

    x, y = job.tensors("test")
    if x.shape[0] == 0:
        return {"num-examples": 0}
    acc, loss = evaluate(model, x, y)
    return {"accuracy": acc, "loss": loss, "num-examples": int(x.shape[0])}


def train_metrics(stats: TrainStats) -> dict[str, float]:
    return {"train-loss": stats.loss, "num-examples": stats.num_examples, "train-seconds": stats.seconds, "steps": stats.steps}
