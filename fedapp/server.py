"""The server's round loop, shared by the ServerApp (`flwr run`) and the in-process
engine: discover nodes, then per round refresh the roster -> train -> aggregate ->
(personalised eval) -> global eval -> one metrics row -> checkpoint. Our own loop rather
than ``Strategy.start`` because runs may end early (FedSPU early stopping), every round
must be written out, and a restarted SuperLink resumes from the last finished round."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord
from flwr.serverapp import Grid

from fedapp import checkpoint, wire
from fedapp.data import check_partition, dataset_for
from fedapp.energy.ledger import Ledger
from fedapp.evaluate import evaluate
from fedapp.logs import log_meters
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.progress import RoundLog, RoundReporter
from fedapp.results import RunWriter, resolved_config
from fedapp.roster import Roster
from fedapp.runtime import configure_threads
from fedapp.strategy import MaskedStrategy
from fedapp.tensorboard_sink import open_sink

log = logging.getLogger("flwr")


def central_eval(
    model: torch.nn.Module,
    arrays: dict[str, np.ndarray],
    x: torch.Tensor,
    y: torch.Tensor,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[float, float]:
    model.load_state_dict({k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()})
    return evaluate(model, x, y, prepare=prepare)


def serve(grid: Grid, raw_config: Mapping[str, Any], discovery_timeout: float = 120.0, report: RoundReporter | None = None) -> Path:
    """Run a whole federation on ``grid`` (or, with ``resume=true``, the rest of it); returns the run folder.
    ``report`` sees each round's metrics row (default: one log line per round)."""
    cfg, method, params = resolve(raw_config)
    report = report or RoundLog(cfg.num_server_rounds)
    sink = open_sink(cfg)  # a missing tensorboard package stops the run here, before any training
    configure_threads(cfg.num_threads)
    ds = dataset_for(cfg)
    check_partition(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed)
    initial = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
    config = resolved_config(cfg, params)
    ckpt = checkpoint.load(cfg.run_dir) if cfg.resume else None
    if ckpt is not None:
        checkpoint.check_compatible(cfg.run_dir, config)
        log.info("resuming %s after round %d", cfg.run_dir, ckpt.round)
    writer = RunWriter(cfg.run_dir, config, keep_rounds=ckpt.round if ckpt else 0)
    roster = Roster(grid, cfg.num_clients)
    roster.discover(discovery_timeout)
    meters = {str(p): str(f.get("energy-meter", "unknown")) for p, f in roster.info.items()}
    writer.write_json("meters.json", meters)
    log_meters(meters)
    ledger = Ledger()
    policy = method.server(cfg, params, initial, roster.info)
    strategy = MaskedStrategy(cfg, policy, roster.nodes)
    arrays, first, token, done = initial, 1, checkpoint.new_token(cfg.run_dir), False
    if ckpt is not None:
        arrays, first, token, done = ckpt.arrays, ckpt.round + 1, ckpt.token, ckpt.finished
        policy.load_state(ckpt.policy)
        strategy.rng.setstate(ckpt.rng)
    x_test, y_test = torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test)
    record = wire.to_record(arrays)
    run_config = ConfigRecord({"run-token": token})
    for rnd in range(first, cfg.num_server_rounds + 1):
        if done:
            log.info("method finished after round %d", rnd - 1)
            break
        start, t_start = time.perf_counter(), time.time()
        strategy.eval_client_metrics, strategy.eval_stats = {}, {}
        if rnd > first:
            strategy.nodes = roster.refresh(cfg.round_timeout)
        replies = grid.send_and_receive(strategy.configure_train(rnd, record, run_config, grid), timeout=cfg.round_timeout)
        new, _ = strategy.aggregate_train(rnd, replies)
        if new is not None:
            record = new
        eval_msgs = list(strategy.configure_evaluate(rnd, record, run_config, grid))
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
        if sink is not None:
            sink.add(row)
        report(rnd, row)
        done = policy.finished(rnd)
        checkpoint.save(cfg.run_dir, checkpoint.Checkpoint(rnd, arrays, policy.state(), strategy.rng.getstate(), token, done))
    writer.save_model(policy.eval_arrays(arrays))  # the model that was evaluated
    if sink is not None:
        sink.close()
    return writer.dir
