"""One run of the federation as an object: ``claim`` takes the run folder (config resolved and
checked, lock held: nothing in the folder changed yet), ``prepare`` builds everything a run needs
before its first write (discovery, data, w0, the checkpoint's checks), ``RunSession.open`` writes
the run's first files and ``RunSession.run`` plays the rounds, one ``play_round`` each.
``fedapp.server.loop.serve`` strings them together with the failure handling."""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from fedapp.client.config_errors import stop_on_config_errors
from fedapp.core import score_keys, wire
from fedapp.core.config import ConfigError, RunConfig
from fedapp.core.device import describe, host_arrays, load_host_arrays, process_device
from fedapp.core.evaluate import evaluate
from fedapp.core.logs import log_devices, log_meters
from fedapp.core.runtime import configure_determinism, configure_threads
from fedapp.core.state import unkeyed_files
from fedapp.core.state_rounds import Lineage
from fedapp.core.versions import mismatches, package_versions
from fedapp.data import Dataset, check_partition, dataset_for
from fedapp.energy.ledger import Ledger
from fedapp.methods.base import Method, ServerPolicy
from fedapp.methods.registry import resolve
from fedapp.models import initial_model
from fedapp.server import checkpoint, reply_checks, rundir
from fedapp.server.node_data import ask_data
from fedapp.server.progress import RoundLog, RoundReporter
from fedapp.server.provenance import collect
from fedapp.server.results import RunWriter, read_metrics, resolved_config
from fedapp.server.roster import Roster
from fedapp.server.row_sinks import RowSink, open_sinks
from fedapp.server.rows import check_method_metrics, row_parts, with_evaluation
from fedapp.server.run_checks import check_run
from fedapp.server.run_log import RunLog
from fedapp.server.scores import Pending, ScoreBook
from fedapp.server.strategy import MaskedStrategy, summarise
from fedapp.server.strategy import describe as reason_of

log = logging.getLogger("flwr")


@dataclass
class Claim:
    """A run folder taken for one run: the resolved config, the server's device, the row sinks and the folder's lock."""

    raw_config: Mapping[str, Any]
    cfg: RunConfig
    method: Method
    params: Any
    device: torch.device
    run_dir: Path
    sink: RowSink | None
    lock: rundir.RunLock


def claim(raw_config: Mapping[str, Any], base: Path | None) -> Claim:
    """Resolve and check the run-config, then take the run folder's lock; an error here leaves the folder as it was."""
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
        rundir.check_reuse(run_dir, cfg.resume, cfg.overwrite, os.path.lexists(run_dir / checkpoint.FILE))  # a bad link is named by load
    except ConfigError:
        lock.release(remove_if_empty=True)
        raise
    return Claim(raw_config, cfg, method, params, device, run_dir, sink, lock)


def check_settings(cfg: RunConfig, method: Method, params: Any, raw_config: Mapping[str, Any]) -> None:
    """Every check that needs the federation's size: the split, then the cross-key checks (run_checks)."""
    check_partition(cfg)
    for warning in check_run(cfg, method, params, raw_config, dataset_for(cfg)):
        log.warning("%s", warning)


def prepare(grid: Grid, taken: Claim, discovery_timeout: float | None, report: RoundReporter | None) -> RunSession:
    """Everything the rounds need, read before the folder's first write: the checkpoint (``resume``),
    the nodes (discovery), the data, w0 and the checkpoint's checks against them; ``overwrite`` then clears the folder."""
    cfg, method, params, run_dir = taken.cfg, taken.method, taken.params, taken.run_dir
    ckpt = checkpoint.load(run_dir) if cfg.resume else None
    roster = Roster(grid, cfg.num_clients)
    roster.discover(cfg.discovery_timeout if discovery_timeout is None else discovery_timeout)
    if not cfg.num_clients:
        cfg = dataclasses.replace(cfg, num_clients=roster.num_clients)
        check_settings(cfg, method, params, taken.raw_config)
    ask_data(roster, cfg.round_timeout)  # each node's data digest, for the provenance
    ds = dataset_for(cfg)
    model = initial_model(cfg, ds)  # w0 from the CPU generator on every machine
    initial = host_arrays(model.state_dict())
    model.to(taken.device)
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
    report = report or RoundLog(cfg.num_server_rounds)
    return RunSession(grid, cfg, method, params, ds, model, initial, roster, ckpt, config, report, taken.sink, taken.device)


def central_eval(
    model: torch.nn.Module,
    arrays: dict[str, np.ndarray],
    x: torch.Tensor,
    y: torch.Tensor,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[float, float]:
    load_host_arrays(model, arrays)
    return evaluate(model, x, y, prepare=prepare)


@dataclass
class RunSession:
    """A prepared run: what ``prepare`` built, then (``open``) its writer and (``run``) the round state:
    the server policy, the strategy, the global model (``arrays`` and its ``record``), the run token and lineage."""

    grid: Grid
    cfg: RunConfig
    method: Method
    params: Any
    ds: Dataset
    model: torch.nn.Module
    initial: dict[str, np.ndarray]
    roster: Roster
    ckpt: checkpoint.Checkpoint | None
    config: dict[str, Any]  # the resolved run-config every checkpoint records
    report: RoundReporter
    sink: RowSink | None
    device: torch.device
    writer: RunWriter = field(init=False)
    policy: ServerPolicy = field(init=False)
    strategy: MaskedStrategy = field(init=False)
    arrays: dict[str, np.ndarray] = field(init=False)
    record: ArrayRecord = field(init=False)
    done: bool = field(init=False)
    token: str = field(init=False)
    lineage: str = field(init=False)  # the lineage of starts the client state keys on ("": one start)
    run_config: ConfigRecord = field(init=False)
    ledger: Ledger = field(default_factory=Ledger, init=False)
    book: ScoreBook = field(init=False)  # the clients' personalised scores (the strategy's train messages ask for them)
    pending: Pending | None = field(default=None, init=False)  # the last round's row while it waits for scores (fedapp.server.scores)
    first_notes: dict[str, Any] = field(default_factory=dict, init=False)  # keys for the first row this start writes

    def open(self, run_log: RunLog, provenance: dict[str, Any] | None) -> None:
        """The run's first writes: run.log, config.json (the writer), no stale failure.json, devices.json."""
        run_dir, ckpt = Path(self.cfg.run_dir), self.ckpt
        run_log.open(run_dir, append=ckpt is not None)
        record = collect(self.cfg, provenance, self.roster.info)
        self.writer = RunWriter(run_dir, self.config, keep_rounds=ckpt.round if ckpt else 0, provenance=record)
        (run_dir / rundir.FAILURE).unlink(missing_ok=True)  # an earlier attempt's reason no longer applies
        devices = {str(p): str(f.get("device", "unknown")) for p, f in self.roster.info.items()}
        self.writer.write_json("devices.json", {"server": describe(self.device), "clients": devices})
        log_devices(devices)

    def run(self) -> None:
        """The rounds from the first one not yet checkpointed, then the model that was evaluated last."""
        try:
            first = self.begin()
            for rnd in range(first, self.cfg.num_server_rounds + 1):
                if self.done:
                    log.info("method finished after round %d", rnd - 1)
                    break
                self.play_round(rnd)
            if self.pending is not None:  # resumed with fewer rounds than the checkpoint's row waited for: the closing evaluate
                self.collect(self.pending, {}, {})
                self.write(self.pending)
                self.pending = None
            self.writer.save_model(self.policy.eval_arrays(self.arrays))
        finally:
            if self.sink is not None:
                self.sink.close()

    def begin(self) -> int:
        """The round state, fresh or from the checkpoint; returns the first round to play."""
        cfg, ckpt = self.cfg, self.ckpt
        meters = {str(p): str(f.get("energy-meter", "unknown")) for p, f in self.roster.info.items()}
        self.writer.write_json("meters.json", meters)
        log_meters(meters)
        if differ := mismatches(package_versions(), self.roster.info, self.roster.nodes):
            log.warning("nodes whose torch or fedapp differs from the server's: %s", "; ".join(differ))
            self.first_notes = {"node_versions_differ": differ}
        self.policy = self.method.server(cfg, self.params, self.initial, self.roster.info, self.model)
        scale = reply_checks.scales(self.initial)  # the step bound's unit, from the initial model in every round (also on resume)
        refresh = lambda: self.roster.refresh(cfg.round_timeout)  # noqa: E731
        self.book = book = ScoreBook(self.policy, cfg)
        self.strategy = MaskedStrategy(cfg, self.policy, self.roster.nodes, refresh, None if ckpt is None else ckpt.rng, scale, book)
        self.arrays, first, self.token, self.done, lineage = self.initial, 1, checkpoint.new_token(cfg.run_dir), False, Lineage()
        if ckpt is not None:
            self.arrays, first, self.token, self.done = ckpt.arrays, ckpt.round + 1, ckpt.token, ckpt.finished
            self.policy.load_state(ckpt.policy)
            pending = book.load_meta(ckpt.scores)  # checked when the checkpoint was read
            if pending is not None and pending.round not in {int(r["round"]) for r in read_metrics(Path(cfg.run_dir))}:
                self.pending = pending  # its row waits for the next round's scores (written already if the run died after it)
            # a new start in the client state's lineage (fedapp.core.state_rounds)
            lineage = Lineage((*Lineage.parse(ckpt.lineage).starts, (first, secrets.token_hex(4))))
            if (context_state := getattr(self.grid, "context_state", None)) is not None:
                context_state.restore(Path(cfg.run_dir) / rundir.CLIENT_STATE / self.token)
        self.record = wire.to_record(self.arrays)
        self.lineage = lineage.text() if len(lineage.starts) > 1 else ""
        lineage_key = {"state-lineage": self.lineage} if self.lineage else {}
        self.run_config = ConfigRecord({"run-token": self.token, "run-dir": cfg.run_dir, **lineage_key})
        return first

    def play_round(self, rnd: int) -> None:
        """One round: train (its messages also score what the previous round's row waits for, which is
        then written), aggregate, central eval, the round's scores (evaluate messages here only in the
        last round), the metrics row (or a pending one, fedapp.server.scores), the checkpoint."""
        cfg, grid, strategy = self.cfg, self.grid, self.strategy
        start, t_start = time.perf_counter(), time.time()
        book = self.book
        book.ask_before(self.pending)
        train_msgs = strategy.configure_train(rnd, self.record, self.run_config, grid)
        result = strategy.aggregate_train(rnd, stop_on_config_errors(strategy.exchange(grid, list(train_msgs), rnd)))
        if self.pending is not None:  # the previous round's row: the scores this round's train replies carried, then the rest
            self.collect(self.pending, result.stats.scores.get(score_keys.BEFORE, {}), result.stats.sent_nodes)
            self.write(self.pending)
            self.pending = None
        if result.arrays is not None:  # else the model stays: record and arrays as they were
            self.record = result.arrays
            self.arrays = result.values if result.values is not None else wire.from_record(result.arrays)
        book.after_training(result.stats.sent_nodes, result.stats.scores.get(score_keys.AFTER, {}))
        self.done = self.policy.finished(rnd)
        pending = Pending(rnd, [], 0, result.stats.client_metrics, (0.0, t_start, 0.0), sorted(result.method_metrics), [])
        if book.on and strategy.personal_eval_round(rnd):
            nodes = result.stats.online
            pending.order = sorted(nodes)
            for pid in pending.order:
                if (score := book.stands(pid, nodes[pid])) is not None:
                    pending.known[pid] = score
                else:
                    pending.need[pid] = nodes[pid]
        final = rnd >= cfg.num_server_rounds or self.done
        if pending.need and final:
            self.collect(pending, {}, {})  # the closing evaluate
        x_test, y_test = torch.from_numpy(self.ds.x_test), torch.from_numpy(self.ds.y_test)
        norm = self.ds.norm.tensor if self.ds.norm else None
        acc, loss = central_eval(self.model, self.policy.eval_arrays(self.arrays), x_test, y_test, norm)
        pending.draft, pending.at = row_parts(rnd, acc, loss, result)
        if refused := self.roster.take_refused():  # claims the roster refused since the last row (fedapp.server.roster)
            pending.draft.append(("roster_refused", refused))
        pending.draft += list(self.first_notes.items())
        self.first_notes = {}
        if (notes := getattr(grid, "round_notes", None)) is not None:  # the in-process engine's batched executor
            pending.draft += notes().items()
        pending.times = (time.perf_counter() - start, t_start, time.time())
        if pending.need:
            self.pending = pending  # the next round's messages bring the rest
        else:
            self.write(pending)
        if (context_state := getattr(grid, "context_state", None)) is not None:
            context_state.save(Path(cfg.run_dir) / rundir.CLIENT_STATE / self.token)
        policy_state, sampling = self.policy.state(), strategy.sampling_state()
        scores = book.meta(self.pending)
        kept = checkpoint.Checkpoint(
            rnd, self.arrays, policy_state, sampling, self.token, self.done, self.config, self.lineage, scores, self.writer.rows_digest()
        )
        checkpoint.save(cfg.run_dir, kept)

    def collect(self, pending: Pending, before: Mapping[int, dict[str, float]], sent: Mapping[int, int]) -> None:
        """Every score ``pending`` still needs: those train replies carried (``before``, from the nodes in
        ``sent``), then by evaluate messages, with ``self.record`` as it stands, to the nodes still to score."""
        strategy = self.strategy
        for pid, metrics in before.items():
            if pid in pending.need:
                try:
                    pending.known[pid] = strategy.check_scores(metrics, sent[pid], sent)[1]
                except Exception as err:  # as an evaluate reply's: that node's evaluation is dropped
                    pending.reasons.append(f"node {sent[pid]}: evaluation dropped ({reason_of(err)})")
                    log.warning("%s", pending.reasons[-1])
        rest = {pid: node for pid, node in pending.need.items() if pid not in pending.known and pid not in before}
        if rest:
            msgs = list(strategy.configure_evaluate(pending.round, self.record, self.run_config, self.grid, rest))
            replies = stop_on_config_errors(self.grid.send_and_receive(msgs, timeout=self.cfg.round_timeout))
            evaluated, dropped = strategy.check_evals(replies)
            self.book.after_evaluation(rest, evaluated)
            pending.known.update(evaluated)
            pending.reasons += dropped
        pending.need = {}

    def write(self, pending: Pending) -> None:
        """``pending``'s row with its evaluation, to metrics.jsonl, the sinks and the progress line."""
        evaluated = summarise({pid: pending.known[pid] for pid in pending.order if pid in pending.known}, pending.reasons)
        row = with_evaluation(pending.draft, pending.at, evaluated)
        seconds, t_start, t_end = pending.times
        row["seconds"] = seconds
        times = self.ledger.round_row(seconds, t_start, t_end, pending.train, evaluated.client_metrics)
        check_method_metrics(dict.fromkeys(pending.method_keys), times)  # the ledger's time and energy keys are core keys too
        row.update(times)
        self.writer.append(row)
        if self.sink is not None:
            self.sink.add(row)
        self.report(pending.round, row)
