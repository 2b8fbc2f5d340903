"""Client side of every method: decode the message, run the method's client policy,
encode the reply. The ClientApp in client_app.py is a thin shell around this."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict

from fedapp import wire
from fedapp.aggregate import is_averaged
from fedapp.config import RunConfig
from fedapp.data import client_data, dataset_for
from fedapp.energy.phases import client_meter, phase, phase_metrics
from fedapp.methods.base import ClientJob, ClientPolicy
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.runtime import configure_threads
from fedapp.state import ContextStore, DiskStore, StateStore
from fedapp.strategy import RESERVED


def state_store(cfg: RunConfig, context: Context, run_token: str = "") -> StateStore:
    """Context.state, or a folder per run on disk: under the node's ``state-dir`` (survives a
    SuperNode restart or a reboot) or the run folder. The server's run token names the folder,
    so a resumed run finds its clients' state and a fresh run in the same run-dir starts clean."""
    node_dir = str(context.node_config.get("state-dir", "") or "")
    kind = cfg.state_store if cfg.state_store != "auto" else ("disk" if node_dir else "context")
    if kind == "context":
        return ContextStore(context)
    root = Path(node_dir) if node_dir else Path(cfg.run_dir) / "client-state"
    return DiskStore(root / run_token if run_token else root)


def node_local(cfg: RunConfig, node_config: Mapping[str, Any]) -> RunConfig:
    """A node's own ``data-root`` wins over the run-config's: each device knows where its data lives."""
    root = node_config.get("data-root")
    return dataclasses.replace(cfg, data_root=str(root)) if root else cfg


def load_global(model: torch.nn.Module, content: RecordDict) -> dict[str, np.ndarray]:
    """Write the received global entries into ``model``; return masks of what was received."""
    sd = model.state_dict()
    current = {k: v.detach().cpu().numpy() for k, v in sd.items()}
    if "arrays-mask" in content.array_records:
        got = wire.decode(content["arrays"], content["arrays-mask"], current, 1.0)  # type: ignore[arg-type]
        values = wire.scatter(got, current)
        received = wire.dense_masks(got, current)
    else:
        values = wire.from_record(content["arrays"])  # type: ignore[arg-type]
        missing = set(current) - set(values)
        if missing:
            raise ValueError(f"global arrays lack {sorted(missing)}")
        received = {k: np.ones(v.shape, bool) for k, v in current.items()}
    model.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in values.items()})
    return received


def make_job(msg: Message, context: Context) -> tuple[ClientJob, ClientPolicy]:
    cfg, method, params = resolve(context.run_config)
    cfg = node_local(cfg, context.node_config)
    configure_threads(cfg.num_threads)
    config = dict(msg.content["config"])  # type: ignore[arg-type]
    pid = int(config.get("partition-id", context.node_config["partition-id"]))  # type: ignore[arg-type]
    server_round = int(config.get("server-round", 0))  # type: ignore[arg-type]
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed)
    received = load_global(model, msg.content)
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + server_round * 10_007 + pid)
    records = {n: wire.from_record(r) for n, r in msg.content.array_records.items() if n not in RESERVED}
    store = state_store(cfg, context, str(config.get("run-token", "")))
    job = ClientJob(cfg, params, pid, server_round, config, records, model, received, client_data(cfg, pid), store, gen)  # type: ignore[arg-type]
    return job, method.client(cfg, params)


def handle_train(msg: Message, context: Context) -> Message:
    job, policy = make_job(msg, context)
    meter = client_meter(job.cfg)
    with phase(meter) as window:
        result = policy.train(job)
    state = {k: v.detach().cpu().numpy() for k, v in job.model.state_dict().items()}
    upload = {k: v for k, v in state.items() if is_averaged(v) and (result.upload is None or k in result.upload)}
    values, mask = wire.encode(upload, result.masks)
    metrics = {**result.metrics, "partition-id": job.pid, **phase_metrics("train", window, meter, job.pid, context.state)}
    content = RecordDict({"values": values, "mask": mask, "metrics": MetricRecord({k: float(v) for k, v in metrics.items()})})
    for name, record in result.records.items():
        content[name] = wire.to_record(record)
    return Message(content, reply_to=msg)


def handle_evaluate(msg: Message, context: Context) -> Message:
    job, policy = make_job(msg, context)
    meter = client_meter(job.cfg)
    with phase(meter) as window:
        metrics = policy.evaluate(job)
    metrics = {**metrics, "partition-id": job.pid, **phase_metrics("eval", window, meter, job.pid, context.state)}
    return Message(RecordDict({"metrics": MetricRecord({k: float(v) for k, v in metrics.items()})}), reply_to=msg)
