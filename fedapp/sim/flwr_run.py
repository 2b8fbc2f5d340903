"""`fedapp sim`: `flwr run` (Ray simulation) with honest exit codes.

`flwr run --stream` exits 0 even when the ServerApp failed, and prints a traceback for a bad
value. This wrapper (1) checks the run-config and the run folder in-process, before anything
starts (exit 2 with one line naming the key); (2) runs `flwr run` on this checkout's own
SuperLink (fedapp.sim.flower_home: own FLWR_HOME and ports), streaming its output until the ServerApp
names an error in one line (Flower's traceback of it and the simulation's teardown are not
waited for); (3) afterwards reads the run folder: exit 1 with the ServerApp's one-line reason
(``failure.json``, or the ``fedapp: error:`` line it logged) when the run failed or left no
results, else 0.

The run folder is always passed to the ServerApp as an absolute path, resolved here against
the working directory (a default run-dir is named here), so it can land nowhere else. Without
``--federation-config`` the simulated federation has ``num-clients`` SuperNodes (where that is
0: the in-process engine's rule, fedapp.sim.run_local.node_count).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedapp.core.config import ConfigError, RunConfig, parse
from fedapp.core.toml_text import toml_value
from fedapp.server import checkpoint, rundir
from fedapp.server.run_log import plain
from fedapp.sim.flower_home import checkout_env, port_owner_problem

ERROR_LINE = re.compile(r"fedapp: error: (.*)$")


def write_run_config(values: Mapping[str, Any], path: Path) -> Path:
    path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()))
    return path


def preflight(overrides: Mapping[str, Any], base: Path) -> tuple[RunConfig, Path]:
    """Everything the ServerApp would refuse before discovery, checked here (raises ConfigError)."""
    from fedapp.core.extras import require

    require("ray", "fedapp sim (Flower's simulation engine; `fedapp run` needs no Ray)")
    parse(RunConfig, overrides)  # the common keys first: no method module (and no torch) imported for a bad value there

    from fedapp.data import check_partition
    from fedapp.methods.registry import resolve
    from fedapp.sim.run_local import full_config

    cfg = resolve(full_config(overrides))[0]
    run_dir = rundir.resolve(cfg.run_dir, cfg.method, cfg.dataset, base)
    has_ckpt = (run_dir / checkpoint.FILE).exists()
    rundir.check_reuse(run_dir, cfg.resume, cfg.overwrite, has_ckpt)
    if cfg.resume and has_ckpt:
        checkpoint.load(run_dir)  # a damaged checkpoint is named now, not after the start
    if cfg.num_clients:
        check_partition(cfg)
    return cfg, run_dir


def supernodes(cfg: RunConfig) -> int:
    from fedapp.sim.run_local import node_count

    return node_count(cfg)


def reason_for(run_dir: Path, started: float, output: list[str], rc: int) -> str | None:
    """Why the run failed (one line), or None when it finished and wrote its results."""
    recorded = rundir.read_failure(run_dir, since=started)
    if recorded:
        return recorded
    logged = [m.group(1) for line in output if (m := ERROR_LINE.search(line))]
    if logged:
        return logged[-1].strip()
    if rc != 0:
        return f"flwr run exited with code {rc}: {output[-1].strip() if output else 'no output'}"
    model = run_dir / "model.npz"
    if not model.exists() or model.stat().st_mtime < started - 1:
        return f"the ServerApp ended without writing results to {run_dir} (see the log above)"
    return None


def run(overrides: Mapping[str, Any], app: Path, federation_config: str | None) -> int:
    """The whole `fedapp sim` command; returns its exit code."""
    try:
        cfg, run_dir = preflight(overrides, Path.cwd())
    except ConfigError as err:
        print(f"fedapp: error: {err}", file=sys.stderr)
        return 2
    env = {**os.environ, **checkout_env(app)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    problem = port_owner_problem(env)
    if problem:
        print(f"fedapp: error: {problem}", file=sys.stderr)
        return 2
    federation = federation_config or f"num-supernodes={supernodes(cfg)}"
    with tempfile.TemporaryDirectory() as tmp:
        config_file = write_run_config({**overrides, "run-dir": str(run_dir)}, Path(tmp) / "run-config.toml")
        flwr = str(Path(sys.executable).with_name("flwr"))
        argv = [flwr, "run", str(app), "--stream", "--run-config", str(config_file), "--federation-config", federation]
        port = env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]
        print(f"fedapp sim: {run_dir} (local SuperLink port {port}, FLWR_HOME {env['FLWR_HOME']})", flush=True)
        started = time.time()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        tail: list[str] = []
        quiet = False  # after our one-line error, Flower's traceback of the same exception is left out
        colour = sys.stdout.isatty()  # a pipe or file gets Flower's log without its colour codes
        for line in proc.stdout:
            line = line if colour else plain(line)
            tail = [*tail[-199:], line]
            if quiet:
                continue
            print(line, end="", flush=True)
            if ERROR_LINE.search(line):  # the run failed and said why: stop following its teardown
                quiet = True
                proc.terminate()  # only this log stream: the SuperLink finishes the failed run by itself
        rc = proc.wait()
    reason = reason_for(run_dir, started, tail, rc)
    if reason:
        print(f"fedapp: error: {reason}", file=sys.stderr)
        return 1
    print(f"results in {run_dir}")
    return 0
