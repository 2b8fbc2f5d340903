"""Run `flwr run` (simulation, managed local SuperLink) and `fedapp sim` for tests.

Every run of a test session goes through one copy of this checkout (its tracked and unignored
files: no .venv for Flower's app-bundle build to walk) and that copy's own managed SuperLink,
on the FLWR_HOME and ports `fedapp.sim.flower_home` derives from the copy's path, exactly what a
second checkout gets. The runs are sequential and each has its own run folder, so they share
the SuperLink safely (and pay its start once). Tests can run beside a user's SuperLink; every
SuperLink started here is stopped by PID when the session ends (tests/conftest.py), and
nothing else is touched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedapp.server import rundir
from fedapp.sim.flower_home import checkout_env, superlink_pids

ROOT = Path(__file__).resolve().parents[1]
FLWR = str(Path(sys.executable).with_name("flwr"))
_copies: list[Path] = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f"'{v}'"
    return repr(v)


def copy_checkout(dest: Path) -> Path:
    """A second checkout of this one at ``dest``: a git clone at this checkout's commit (sharing its
    objects, read only) holding its tracked and unignored files as they are now, so the copy is as
    dirty as this one and a run from it records the same commit and diff digest."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    dest.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(dest)], check=True, capture_output=True)
    for args in (["update-ref", "--no-deref", "HEAD", head], ["read-tree", head]):
        subprocess.run(["git", "-C", str(dest), *args], check=True, capture_output=True)
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    _copies.append(dest)
    return dest


def shared_checkout() -> Path:
    """The session's copy of the checkout, made on first use."""
    if not _copies:
        copy_checkout(Path(tempfile.mkdtemp(prefix="fedapp-tests-")) / "fedapp")
    return _copies[0]


def run_env(checkout: Path) -> dict[str, str]:
    """The environment `scripts/flwr-env.sh` gives ``checkout``, with this interpreter's tools first on PATH.
    ``RAY_ADDRESS=local``: the simulation starts its own Ray instance; without it ``ray.init()`` joins the
    machine's latest Ray cluster (/tmp/ray/ray_current_cluster), another program's, and may wait on it forever."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("FLWR_", "FEDAPP_"))}
    env.update(checkout_env(checkout))
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1", RAY_ADDRESS="local")
    return env


def stop_superlink(flwr_home: Path) -> None:
    for pid in superlink_pids(flwr_home):
        try:
            os.killpg(pid, signal.SIGTERM) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)


def stop_all() -> None:
    """Stop the SuperLinks of every checkout copy made this session, and remove the copies."""
    for copy in _copies:
        stop_superlink(Path(checkout_env(copy)["FLWR_HOME"]))
        shutil.rmtree(copy.parent, ignore_errors=True)
    _copies.clear()


# Start the managed SuperLink with Flower's own command and readiness probe (its /health endpoint,
# giving up early if the process exits), but with a deadline a loaded machine can meet: `flwr run`
# allows it 15 s and fails the run ("Failed to start local SuperLink within 15s").
_START = (
    "import sys, flwr.cli.local_superlink as m; m.LOCAL_SUPERLINK_STARTUP_TIMEOUT = float(sys.argv[1]); "
    "m._is_local_superlink_started() or m._start_local_superlink()"
)


def ensure_superlink(checkout: Path, timeout: float = 300) -> None:
    """The copy's managed SuperLink, started (if it is not up) and answering its health probe."""
    argv = [sys.executable, "-c", _START, str(timeout)]
    proc = subprocess.run(argv, cwd=checkout, env=run_env(checkout), capture_output=True, text=True, timeout=timeout + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"local SuperLink of {checkout} did not start: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")


# Nodes answer discovery once Ray is up and each simulated node has imported fedapp and torch: seconds
# on an idle machine, but a loaded one stretches every start (a 1-round run took 311 s here at load
# average 36-188 on 2 cores), so the default 120 s could end a run that was only slow. A test that
# means a shorter discovery sets its own.
DISCOVERY_TIMEOUT = 400.0


def flwr_run(tmp: Path, run_config: dict[str, object], num_supernodes: int = 2, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`flwr run <checkout> --stream` on the session's shared SuperLink; returns the finished process,
    which says nothing of how the run ended (:func:`assert_completed` does).
    (``tmp`` is kept for callers; results go to the run-dir they name.)"""
    checkout = shared_checkout()
    ensure_superlink(checkout)
    run_config = {"discovery-timeout": DISCOVERY_TIMEOUT, **run_config}
    overrides = " ".join(f"{k}={toml_value(v)}" for k, v in run_config.items())
    federation = f"num-supernodes={num_supernodes} client-resources-num-cpus=1"
    cmd = [FLWR, "run", str(checkout), "--stream", "--run-config", overrides, "--federation-config", federation]
    return subprocess.run(cmd, cwd=checkout, env=run_env(checkout), capture_output=True, text=True, timeout=timeout)


def run_status(proc: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    """(status, details) the SuperLink records for the run ``proc`` started, e.g. ("finished:failed",
    "Simulation failed with exception: ..."); ("not started", "") when ``proc`` started none."""
    started = re.search(r"Successfully started run (\d+)", proc.stdout)
    if not started:
        return "not started", ""
    checkout = shared_checkout()
    argv = [FLWR, "ls", "--run-id", started.group(1), "--format", "json"]
    listed = subprocess.run(argv, cwd=checkout, env=run_env(checkout), capture_output=True, text=True, timeout=120, check=True)
    run = json.loads(listed.stdout)["runs"][0]
    return str(run["status"]), str(run["status-details"])


def assert_completed(proc: subprocess.CompletedProcess[str], run_dir: Path) -> None:
    """What a simulated run's test waits for: the SuperLink's record of the run as finished:completed,
    which Flower writes only once the ServerApp returned, so the run folder is whole by then.
    `flwr run --stream` exits 0 whenever the run finished, however: a ServerApp that raised (fedapp's
    failure.json names why), or a run Flower failed itself. The latter is the flaky "no config.json":
    the SuperLink fails a running task whose heartbeat it has not acknowledged for 60 s (2 x 30 s,
    fixed in flwr), and on a heavily loaded machine the simulation process's heartbeats (a thread
    sending one every ~20 s) miss that window while the ServerApp still waits for its nodes, so
    nothing is written. The assertion names the status, its details and failure.json."""
    status, details = run_status(proc) if proc.returncode == 0 else (f"flwr run exited {proc.returncode}", "")
    failure = run_dir / rundir.FAILURE
    recorded = failure.read_text().strip() if failure.exists() else "none"
    tail = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert status == "finished:completed", f"run {status}: {details} (failure.json: {recorded})\n{tail}"


def fedapp_sim(checkout: Path, args: list[str]) -> subprocess.Popen[str]:
    """`python -m fedapp sim ARGS` started in ``checkout`` (so its own fedapp runs), as a user would."""
    env = {k: v for k, v in run_env(checkout).items() if not k.startswith(("FLWR_", "FEDAPP_"))}  # the wrapper sets its own
    return subprocess.Popen(
        [sys.executable, "-m", "fedapp", "sim", *args], cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
