"""The server's round loop, shared by the ServerApp (`flwr run`) and the in-process
engine: discover nodes, then per round refresh the roster -> train -> aggregate ->
(personalised eval) -> global eval -> one metrics row -> checkpoint. Our own loop rather
than ``Strategy.start`` because runs may end early (FedSPU early stopping), every round
must be written out, and a restarted SuperLink resumes from the last finished round."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord
from flwr.serverapp import Grid

from fedapp.client.config_errors import stop_on_config_errors
from fedapp.core import wire
from fedapp.core.config import ConfigError, RunConfig
from fedapp.core.device import describe, host_arrays, load_host_arrays, process_device
from fedapp.core.evaluate import evaluate
from fedapp.core.logs import log_devices, log_meters
from fedapp.core.runtime import configure_determinism, configure_threads
from fedapp.core.state import unkeyed_files
from fedapp.core.state_rounds import Lineage
from fedapp.data import Dataset, check_partition, dataset_for
from fedapp.energy.ledger import Ledger
from fedapp.methods.base import Method
from fedapp.methods.registry import resolve
from fedapp.models import initial_model
from fedapp.server import checkpoint, reply_checks, rundir
from fedapp.server.progress import RoundLog, RoundReporter
from fedapp.server.provenance import collect
from fedapp.server.results import RunWriter, resolved_config
from fedapp.server.roster import Roster
from fedapp.server.row_sinks import RowSink, open_sinks
from fedapp.server.run_checks import check_run
from fedapp.server.run_log import RunLog
from fedapp.server.strategy import EvalResult, MaskedStrategy, RoundResult

log = logging.getLogger("flwr")


def central_eval(
    model: torch.nn.Module,
    arrays: dict[str, np.ndarray],
    x: torch.Tensor,
    y: torch.Tensor,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[float, float]:
    load_host_arrays(model, arrays)
    return evaluate(model, x, y, prepare=prepare)


def serve(
    grid: Grid, raw_config: Mapping[str, Any], base: Path | None = None, provenance: dict[str, Any] | None = None,
    discovery_timeout: float | None = None, report: RoundReporter | None = None,
) -> Path:  # fmt: skip
    """Run a whole federation on ``grid`` (or, with ``resume=true``, the rest of it); returns the run folder.

    ``base`` is the folder a relative (or default) run-dir resolves against; ``discovery_timeout``
    overrides the run-config's ``discovery-timeout``; ``report`` sees each round's metrics row
    (default: one log line per round). Nothing in the run
    folder changes until the config is valid, the folder may be used (fedapp.server.rundir), its lock
    is held and discovery found every partition; a failure after the lock is recorded in the
    folder's failure.json (what `fedapp sim` reports)."""
    run_log = RunLog()  # held until the run starts, then <run-dir>/run.log
    try:
        return _serve(grid, raw_config, base, provenance, discovery_timeout, report, run_log)
    finally:
        run_log.close()


def _serve(
    grid: Grid, raw_config: Mapping[str, Any], base: Path | None, provenance: dict[str, Any] | None,
    discovery_timeout: float | None, report: RoundReporter | None, run_log: RunLog,
) -> Path:  # fmt: skip
    cfg, method, params = resolve(raw_config)
    configure_threads(cfg.num_threads)
    configure_determinism(cfg.deterministic)
    device = process_device(cfg.device)  # central evaluation runs on the server's own device
    run_dir = rundir.resolve(cfg.run_dir, cfg.method, cfg.dataset, base)
    cfg = dataclasses.replace(cfg, run_dir=str(run_dir))
    sink = open_sinks(cfg)  # a missing tensorboard or mlflow package stops the run here, before any training
    if cfg.num_clients:  # a split or setting that cannot work fails before any waiting
        check_settings(cfg, method, params, raw_config)
    lock = rundir.RunLock(run_dir).acquire()
    try:  # under the lock: a run that finished a moment ago is seen, not overwritten
        rundir.check_reuse(run_dir, cfg.resume, cfg.overwrite, (run_dir / checkpoint.FILE).exists())
    except ConfigError:
        lock.release(remove_if_empty=True)
        raise
    started = False
    try:
        ckpt = checkpoint.load(run_dir) if cfg.resume else None
        roster = Roster(grid, cfg.num_clients)
        roster.discover(cfg.discovery_timeout if discovery_timeout is None else discovery_timeout)
        if not cfg.num_clients:
            cfg = dataclasses.replace(cfg, num_clients=roster.num_clients)
            check_settings(cfg, method, params, raw_config)
        ds = dataset_for(cfg)
        model = initial_model(cfg, ds)  # w0 from the CPU generator on every machine
        initial = host_arrays(model.state_dict())
        model.to(device)
        config = resolved_config(cfg, params)
        if ckpt is not None:
            checkpoint.check_compatible(run_dir, config, ckpt)
            checkpoint.check_contents(run_dir, ckpt, initial, cfg.num_server_rounds)
            if getattr(grid, "context_state", None) is None and method.client(cfg, params).state_schema(model, initial):
                checkpoint.check_state_kept(roster.info)  # client state in a SuperNode's memory is gone
            old = unkeyed_files(run_dir / rundir.CLIENT_STATE / ckpt.token)
            if old:
                raise ConfigError(
                    f"resume=true: client state {old[0]} was written by an older fedapp (one unkeyed dict per client), "
                    "which this version does not read; start the run afresh (overwrite=true or a new run-dir)"
                )
            log.info("resuming %s after round %d", run_dir, ckpt.round)
        if cfg.overwrite:
            rundir.clear(run_dir)
        started = True
        run_log.open(run_dir, append=ckpt is not None)
        writer = RunWriter(run_dir, config, keep_rounds=ckpt.round if ckpt else 0, provenance=collect(cfg, provenance))
        with contextlib.suppress(FileNotFoundError):
            (run_dir / rundir.FAILURE).unlink()  # an earlier attempt's reason no longer applies
        devices = {str(p): str(f.get("device", "unknown")) for p, f in roster.info.items()}
        writer.write_json("devices.json", {"server": describe(device), "clients": devices})
        log_devices(devices)
        try:
            report = report or RoundLog(cfg.num_server_rounds)
            rounds(grid, cfg, method, params, ds, model, initial, roster, writer, ckpt, config, report, sink)
        finally:
            if sink is not None:
                sink.close()
    except BaseException as err:
        rundir.record_failure(run_dir, one_line(err), "rounds" if started else "start")
        if started:
            run_log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR run failed: {one_line(err)} (failure.json)")
        raise
    finally:
        lock.release(remove_if_empty=not started)
    return run_dir


def check_settings(cfg: RunConfig, method: Method, params: Any, raw_config: Mapping[str, Any]) -> None:
    """Every check that needs the federation's size: the split, then the cross-key checks (run_checks)."""
    check_partition(cfg)
    for warning in check_run(cfg, method, params, raw_config, dataset_for(cfg)):
        log.warning("%s", warning)


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if isinstance(err, ConfigError) and text else f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


CORE_KEYS = frozenset({
    "round", "accuracy", "loss", "clients", "failures", "bytes_up", "bytes_up_eval", "bytes_down", "coverage",
    "failed_pids", "failure_reasons", "eval_failures", "personalized_accuracy", "personalized_accuracy_min",
    "personalized_accuracy_max", "evaluated_clients", "aggregate_rejected", "train_seconds", "seconds", "roster_refused",
    "anomaly", "wire_bytes_up", "wire_bytes_down", "wire_bytes_clients", "mb_total", "downlink",
})  # fmt: skip
"""The round loop's own metrics.jsonl keys; a method's metrics may not reuse one, nor one of the
time and energy keys the ledger adds after them (fedapp.energy.ledger; checked in ``rounds``)."""


def check_method_metrics(metrics: Mapping[str, Any], taken: Iterable[str]) -> None:
    clash = sorted(set(metrics) & set(taken))
    if clash:
        raise ValueError(f"method metric(s) {clash} reuse core metrics.jsonl keys; rename them in the method's after_round")


def round_row(rnd: int, acc: float, loss: float, result: RoundResult, evaluated: EvalResult) -> dict[str, Any]:
    """One metrics.jsonl row's round part: the core keys, the evaluation's, then the method's own
    (a method metric named like a core key is a bug in the method: ValueError, never an overwrite)."""
    check_method_metrics(result.method_metrics, CORE_KEYS)
    row: dict[str, Any] = {"round": rnd, "accuracy": acc, "loss": loss, **result.stats.row(evaluated.reasons)}
    row.update(evaluated.stats)
    if result.rejected:
        row["aggregate_rejected"] = 1
    row.update(result.method_metrics)
    row["train_seconds"] = {str(p): m.get("train-seconds", 0.0) for p, m in sorted(result.stats.client_metrics.items())}
    return row


def rounds(
    grid: Grid, cfg: RunConfig, method: Method, params: Any, ds: Dataset, model: torch.nn.Module,
    initial: dict[str, np.ndarray], roster: Roster, writer: RunWriter, ckpt: checkpoint.Checkpoint | None,
    config: dict[str, Any], report: RoundReporter, sink: RowSink | None,
) -> None:  # fmt: skip
    """The round loop proper, from the first round not yet checkpointed; ``config`` is the
    resolved run-config every checkpoint records."""
    meters = {str(p): str(f.get("energy-meter", "unknown")) for p, f in roster.info.items()}
    writer.write_json("meters.json", meters)
    log_meters(meters)
    ledger = Ledger()
    policy = method.server(cfg, params, initial, roster.info, model)
    sampling = None if ckpt is None else ckpt.rng
    strategy = MaskedStrategy(cfg, policy, roster.nodes, lambda: roster.refresh(cfg.round_timeout), sampling)
    strategy.scale = reply_checks.scales(initial)  # the step bound's unit, from the initial model in every round (also on resume)
    arrays, first, token, done, lineage = initial, 1, checkpoint.new_token(cfg.run_dir), False, Lineage()
    context_state = getattr(grid, "context_state", None)  # the in-process engine keeps Context.state with checkpoints
    if ckpt is not None:
        arrays, first, token, done = ckpt.arrays, ckpt.round + 1, ckpt.token, ckpt.finished
        policy.load_state(ckpt.policy)
        lineage = Lineage((*Lineage.parse(ckpt.lineage).starts, (first, secrets.token_hex(4))))  # client state: fedapp.core.state_rounds
        if context_state is not None:
            context_state.restore(Path(cfg.run_dir) / rundir.CLIENT_STATE / token)
    x_test, y_test = torch.from_numpy(ds.x_test), torch.from_numpy(ds.y_test)
    record = wire.to_record(arrays)
    lineage_key = {"state-lineage": lineage.text()} if len(lineage.starts) > 1 else {}
    run_config = ConfigRecord({"run-token": token, "run-dir": cfg.run_dir, **lineage_key})
    for rnd in range(first, cfg.num_server_rounds + 1):
        if done:
            log.info("method finished after round %d", rnd - 1)
            break
        start, t_start = time.perf_counter(), time.time()
        train_msgs = strategy.configure_train(rnd, record, run_config, grid)
        result = strategy.aggregate_train(rnd, stop_on_config_errors(strategy.exchange(grid, list(train_msgs), rnd)))
        if result.arrays is not None:
            record = result.arrays
        evaluated = EvalResult()
        eval_msgs = list(strategy.configure_evaluate(rnd, record, run_config, grid))
        if eval_msgs:
            evaluated = strategy.aggregate_evaluate(rnd, stop_on_config_errors(grid.send_and_receive(eval_msgs, timeout=cfg.round_timeout)))
        arrays = wire.from_record(record)
        acc, loss = central_eval(model, policy.eval_arrays(arrays), x_test, y_test, ds.norm.tensor if ds.norm else None)
        row = round_row(rnd, acc, loss, result, evaluated)
        if refused := roster.take_refused():  # claims the roster refused since the last row (fedapp.server.roster)
            row["roster_refused"] = refused
        if (notes := getattr(grid, "round_notes", None)) is not None:  # the in-process engine's batched executor
            row.update(notes())
        row["seconds"] = time.perf_counter() - start
        times = ledger.round_row(row["seconds"], t_start, time.time(), result.stats.client_metrics, evaluated.client_metrics)
        check_method_metrics(result.method_metrics, times)  # the ledger's time and energy keys are core keys too
        row.update(times)
        writer.append(row)
        if sink is not None:
            sink.add(row)
        report(rnd, row)
        done = policy.finished(rnd)
        if context_state is not None:
            context_state.save(Path(cfg.run_dir) / rundir.CLIENT_STATE / token)
        lineage_text = lineage_key.get("state-lineage", "")
        checkpoint.save(
            cfg.run_dir, checkpoint.Checkpoint(rnd, arrays, policy.state(), strategy.sampling_state(), token, done, config, lineage_text)
        )
    writer.save_model(policy.eval_arrays(arrays))  # the model that was evaluated
