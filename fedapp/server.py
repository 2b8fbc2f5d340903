"""The server's round loop, shared by the ServerApp (`flwr run`) and the in-process
engine: discover nodes, then per round train -> aggregate -> (personalised eval) ->
global eval -> one metrics row. Our own loop rather than ``Strategy.start`` because
runs may end early (FedSPU early stopping) and every round must be written out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fedapp import wire
from fedapp.config import ConfigError
from fedapp.data import check_partition, dataset_for
from fedapp.energy.ledger import Ledger
from fedapp.evaluate import evaluate
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.results import RunWriter, resolved_config
from fedapp.runtime import configure_threads
from fedapp.strategy import MaskedStrategy

log = logging.getLogger("flwr")


def discover(grid: Grid, num_clients: int, timeout: float) -> tuple[dict[int, int], dict[int, dict[str, Any]]]:
    """Ask every node who it is (query message). Returns pid -> node id, pid -> facts."""
    deadline = time.monotonic() + timeout
    nodes: dict[int, int] = {}
    info: dict[int, dict[str, Any]] = {}
    asked: set[int] = set()
    while True:
        ids = [i for i in grid.get_node_ids() if i not in asked]
        if ids:
            msgs = [Message(RecordDict(), dst_node_id=i, message_type=MessageType.QUERY) for i in ids]
            for reply in grid.send_and_receive(msgs, timeout=max(1.0, deadline - time.monotonic())):
                asked.add(reply.metadata.src_node_id)
                if reply.has_error():
                    log.warning("node %s did not answer discovery: %s", reply.metadata.src_node_id, reply.error.reason)
                    continue
                facts = dict(reply.content["info"])  # type: ignore[arg-type]
                if "energy-error" in facts:
                    raise ConfigError(f"node {reply.metadata.src_node_id}: {facts['energy-error']!s}")
                pid = int(facts["partition-id"])  # type: ignore[arg-type]
                if pid in nodes and nodes[pid] != reply.metadata.src_node_id:
                    log.warning("partition-id %d claimed by nodes %d and %d; using the newer", pid, nodes[pid], reply.metadata.src_node_id)
                nodes[pid], info[pid] = reply.metadata.src_node_id, facts
        wanted = [p for p in range(num_clients) if p not in nodes]
        if not wanted:
            return {p: nodes[p] for p in range(num_clients)}, {p: info[p] for p in range(num_clients)}
        if time.monotonic() > deadline:
            raise ConfigError(
                f"run-config key 'num-clients' = {num_clients}, but after {timeout:.0f}s no node holds partition-id(s) "
                f"{wanted[:10]} ({len(nodes)} node(s) found). In simulation pass "
                f'--federation-config "num-supernodes={num_clients}".'
            )
        time.sleep(0.5)


def central_eval(
    model: torch.nn.Module,
    arrays: dict[str, np.ndarray],
    x: torch.Tensor,
    y: torch.Tensor,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[float, float]:
    model.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()})
    return evaluate(model, x, y, prepare=prepare)


def serve(grid: Grid, raw_config: Mapping[str, Any], discovery_timeout: float = 120.0) -> Path:
    """Run a whole federation on ``grid``; returns the run folder."""
    cfg, method, params = resolve(raw_config)
    configure_threads(cfg.num_threads)
    ds = dataset_for(cfg)
    check_partition(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed)
    arrays = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    writer = RunWriter(cfg.run_dir, resolved_config(cfg, params))
    nodes, info = discover(grid, cfg.num_clients, discovery_timeout)
    meters = {str(p): str(f.get("energy-meter", "unknown")) for p, f in info.items()}
    writer.write_json("meters.json", meters)
    for text in sorted(set(meters.values())):
        log.info("clients %s: %s", ",".join(p for p, m in meters.items() if m == text), text)
    ledger = Ledger()
    policy = method.server(cfg, params, arrays, info)
    strategy = MaskedStrategy(cfg, policy, nodes)
    x_test, y_test = torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test)
    record = wire.to_record(arrays)
    for rnd in range(1, cfg.num_server_rounds + 1):
        start, t_start = time.perf_counter(), time.time()
        strategy.eval_client_metrics = {}
        replies = grid.send_and_receive(strategy.configure_train(rnd, record, ConfigRecord(), grid), timeout=cfg.round_timeout)
        new, _ = strategy.aggregate_train(rnd, replies)
        if new is not None:
            record = new
        eval_msgs = list(strategy.configure_evaluate(rnd, record, ConfigRecord(), grid))
        if eval_msgs:
            strategy.aggregate_evaluate(rnd, grid.send_and_receive(eval_msgs, timeout=cfg.round_timeout))
        arrays = wire.from_record(record)
        acc, loss = central_eval(model, policy.eval_arrays(arrays), x_test, y_test, ds.norm.tensor if ds.norm else None)
        row = {"round": rnd, "accuracy": acc, "loss": loss, **strategy.stats.row()}
        row.update(strategy.eval_stats)
        row.update(strategy.extra_metrics)
        row["train_seconds"] = {str(p): m.get("train-seconds", 0.0) for p, m in sorted(strategy.stats.client_metrics.items())}
        row["seconds"] = time.perf_counter() - start
        row.update(ledger.round_row(row["seconds"], t_start, time.time(), strategy.stats.client_metrics, strategy.eval_client_metrics))
        writer.append(row)
        log.info("round %d: accuracy %.4f loss %.4f clients %d failures %d", rnd, acc, loss, row["clients"], row["failures"])
        if policy.finished(rnd):
            log.info("method finished after round %d", rnd)
            break
    writer.save_model(policy.eval_arrays(arrays))  # the model that was evaluated
    return writer.dir
