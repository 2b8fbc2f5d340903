"""Client side of every method: decode the message, run the method's client policy,
encode the reply. The ClientApp in client_app.py is a thin shell around this.

Per message only the message's own work: the run-config, the model and a shared global
record come from the process's caches (fedapp.client.cache), the client's data from
fedapp.data.on_device, already on the process's device (fedapp.core.device).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict

from fedapp.batched.seam import alone
from fedapp.client.cache import ProcessModel, global_arrays, process_model, resolve_once
from fedapp.core import score_keys, wire
from fedapp.core.aggregate import is_averaged
from fedapp.core.config import RunConfig
from fedapp.core.device import host_arrays, load_host_arrays, node_device
from fedapp.core.runtime import configure_determinism, configure_threads
from fedapp.core.state import ContextStore, DiskStore, token_folder
from fedapp.core.state_rounds import Lineage, RoundStore
from fedapp.data import dataset_for
from fedapp.data.on_device import client_tensors
from fedapp.downlink import cache
from fedapp.downlink.precision import narrow, widen
from fedapp.energy.phases import client_meter, phase, phase_metrics
from fedapp.energy.sampler import Sampler
from fedapp.methods.base import ClientJob, ClientPolicy
from fedapp.server.rundir import CLIENT_STATE

log = logging.getLogger("flwr")

Masks = dict[str, np.ndarray]
Arrays = dict[str, np.ndarray]


def state_store(cfg: RunConfig, context: Context, run_token: str = "") -> ContextStore | DiskStore:
    """Context.state, or a folder per run on disk: under the node's ``state-dir`` (survives a
    SuperNode restart or a reboot) or the run folder. The server's run token names the folder,
    so a resumed run finds its clients' state and a fresh run in the same run-dir starts clean."""
    node_dir = str(context.node_config.get("state-dir", "") or "")
    kind = cfg.state_store if cfg.state_store != "auto" else ("disk" if node_dir else "context")
    if kind == "context":
        return ContextStore(context)
    root = Path(node_dir) if node_dir else Path(cfg.run_dir) / CLIENT_STATE
    return DiskStore(token_folder(root, run_token) if run_token else root)


def node_local(cfg: RunConfig, node_config: Mapping[str, Any]) -> RunConfig:
    """A node's own ``data-root`` wins over the run-config's: each device knows where its data lives.
    ``num-clients = 0`` is the federation's size, the node's ``num-partitions`` (the server checked
    at discovery that every node reports the same)."""
    root = node_config.get("data-root")
    cfg = dataclasses.replace(cfg, data_root=str(root)) if root else cfg
    if not cfg.num_clients and "num-partitions" in node_config:
        cfg = dataclasses.replace(cfg, num_clients=int(node_config["num-partitions"]))
    return cfg


def load_global(pm: ProcessModel, content: RecordDict, cached: Callable[[Arrays, Masks], Arrays], wire_dtype: str = "float32") -> Masks:
    """Set the process's model to w0 with the received global entries written in (every
    entry is overwritten, so nothing of an earlier message survives); return masks of what
    was received. A ``downlink = selected`` message is completed from the node's model
    cache by ``cached`` (fedapp.downlink.cache), which raises CacheMiss before any training; its
    tensors of which only some entries changed come as those entries and their mask (``arrays-mask``).
    Float32 tensors sent as ``wire_dtype`` (fedapp.downlink.precision) are widened first."""
    current = pm.initial
    if cache.DIGEST_KEY in content["config"] and "arrays-mask" in content.array_records:
        delta = wire.decode(content["arrays"], content["arrays-mask"], current, 1.0, wire_dtype)  # type: ignore[arg-type]
        values = cached(delta.values, delta.masks)
        received = pm.everything
    elif cache.DIGEST_KEY in content["config"]:  # type: ignore[operator]
        values = cached(widen(global_arrays(content["arrays"]), current, wire_dtype), {})  # type: ignore[arg-type]
        received = pm.everything
    elif "arrays-mask" in content.array_records:
        got = wire.decode(content["arrays"], content["arrays-mask"], current, 1.0, wire_dtype)  # type: ignore[arg-type]
        values = wire.scatter(got, current)
        received = wire.dense_masks(got, current)
    else:
        values = widen(global_arrays(content["arrays"]), current, wire_dtype)  # type: ignore[arg-type]
        missing = set(current) - set(values)
        if missing:
            raise ValueError(f"global arrays lack {sorted(missing)}")
        received = pm.everything
    load_host_arrays(pm.model, values)
    return received


def job_generator(cfg: RunConfig, server_round: int, pid: int) -> torch.Generator:
    """The CPU generator of one client's message in one round (every random draw of its job)."""
    return torch.Generator().manual_seed(cfg.seed * 1_000_003 + server_round * 10_007 + pid)


def make_job(msg: Message, context: Context) -> tuple[ClientJob, ClientPolicy]:
    job, policy, _ = build_job(msg, context)
    return job, policy


def build_job(msg: Message, context: Context) -> tuple[ClientJob, ClientPolicy, ProcessModel]:
    """The message's job and policy, and the process model its job trains (reset, the global values loaded)."""
    cfg, method, params = resolve_once(context.run_config)
    cfg = node_local(cfg, context.node_config)
    configure_threads(cfg.num_threads)
    configure_determinism(cfg.deterministic)
    device = node_device(cfg, context.node_config)
    config = dict(msg.content["config"])  # type: ignore[arg-type]
    if config.get("run-dir"):  # the folder the server resolved (a default run-dir is named there)
        cfg = dataclasses.replace(cfg, run_dir=str(config["run-dir"]))
    pid = int(config.get("partition-id", context.node_config["partition-id"]))  # type: ignore[arg-type]
    server_round = int(config.get("server-round", 0))  # type: ignore[arg-type]
    ds = dataset_for(cfg)
    pm = process_model(cfg, ds, device)
    slots = state_store(cfg, context, str(config.get("run-token", "")))

    def cached(sent: Arrays, masks: Masks) -> Arrays:
        return cache.assemble(slots, pid, server_round, config, sent, pm.initial, masks)

    received = load_global(pm, msg.content, cached, cfg.wire_dtype)
    gen = job_generator(cfg, server_round, pid)
    records = {n: wire.from_record(r) for n, r in msg.content.array_records.items() if n not in wire.RESERVED}
    policy = method.client(cfg, params)
    lineage = Lineage.parse(str(config.get("state-lineage", "")))
    store = RoundStore(slots, server_round, lineage, policy.state_schema(pm.model, pm.initial))
    data = client_tensors(cfg, pid, device)
    job = ClientJob(cfg, params, pid, server_round, config, records, pm.model, pm.initial, received, data, store, gen, device)  # type: ignore[arg-type]
    return job, policy, pm


def score(job: ClientJob, policy: ClientPolicy, meter: Sampler | None, state: RecordDict) -> dict[str, float]:
    """What an evaluate message to ``job``'s client in ``job.server_round`` would report ({} if the
    evaluation raises: the server then sends that evaluate message, which says why)."""
    try:
        with phase(meter) as window, alone():
            metrics = policy.evaluate(job)
    except Exception as err:  # the training goes on; the server asks again by an evaluate message
        log.warning("client %d: scoring for round %d failed (%s); the server asks by an evaluate message", job.pid, job.server_round, err)
        return {}
    return {**metrics, "partition-id": job.pid, **phase_metrics("eval", window, meter, job.pid, state)}


def score_received(job: ClientJob, policy: ClientPolicy, pm: ProcessModel, meter: Sampler | None, state: RecordDict) -> dict[str, float]:
    """Before training: the score of the model as received, as the evaluate message of the round
    named by ``score-before`` would report it (its round's generator); then the model, the default
    generator, trainability and mode are put back exactly as the training would have found them."""
    rnd = int(job.config[score_keys.BEFORE])
    kept = {k: v.detach().clone() for k, v in job.model.state_dict().items()}
    try:
        return score(dataclasses.replace(job, server_round=rnd, gen=job_generator(job.cfg, rnd, job.pid)), policy, meter, state)
    finally:
        pm.reset()
        job.model.load_state_dict(kept)


def handle_train(msg: Message, context: Context) -> Message:
    try:
        job, policy, pm = build_job(msg, context)
    except cache.CacheMiss as miss:  # nothing trains on a bad cache: the server sends this node the full model
        pid = int(msg.content["config"].get("partition-id", context.node_config["partition-id"]))  # type: ignore[union-attr, arg-type]
        return Message(RecordDict({"metrics": MetricRecord({"partition-id": pid, cache.MISS_METRIC: miss.code})}), reply_to=msg)
    meter = client_meter(job.cfg, context.node_config, job.device)
    before = score_received(job, policy, pm, meter, context.state) if job.config.get(score_keys.BEFORE) else {}
    with phase(meter) as window:
        result = policy.train(job)
    state = host_arrays(job.model.state_dict())
    upload = {k: v for k, v in state.items() if is_averaged(v) and (result.upload is None or k in result.upload)}
    values, mask = wire.encode(narrow(upload, job.cfg.wire_dtype), result.masks)
    metrics = {**result.metrics, "partition-id": job.pid, **phase_metrics("train", window, meter, job.pid, context.state)}
    after = score(job, policy, meter, context.state) if job.config.get(score_keys.AFTER) else {}
    metrics.update({**score_keys.prefixed(score_keys.BEFORE, before), **score_keys.prefixed(score_keys.AFTER, after)})
    content = RecordDict({"values": values, "mask": mask, "metrics": MetricRecord({k: float(v) for k, v in metrics.items()})})
    for name, record in result.records.items():
        content[name] = wire.to_record(record)
    return Message(content, reply_to=msg)


def handle_evaluate(msg: Message, context: Context) -> Message:
    job, policy = make_job(msg, context)
    meter = client_meter(job.cfg, context.node_config, job.device)
    with phase(meter) as window:
        metrics = policy.evaluate(job)
    metrics = {**metrics, "partition-id": job.pid, **phase_metrics("eval", window, meter, job.pid, context.state)}
    return Message(RecordDict({"metrics": MetricRecord({k: float(v) for k, v in metrics.items()})}), reply_to=msg)
