"""Run `flwr run` (simulation, managed local SuperLink) in isolation for tests.

Each call gets its own FLWR_HOME under a temp folder and its own free ports, so
tests can run beside a user's SuperLink; the SuperLink it spawned is stopped by PID
(found by its FLWR_HOME in the command line) and nothing else is touched.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLWR = str(Path(sys.executable).with_name("flwr"))


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


def superlink_pids(flwr_home: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "flower-superlink" in cmd and str(flwr_home) in cmd:
            pids.append(int(proc.name))
    return pids


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


def flwr_run(tmp: Path, run_config: dict[str, object], num_supernodes: int = 2, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`flwr run . --stream` from the project root; returns the finished process."""
    home = tmp / "flwr-home"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
        "RAY_DISABLE_USAGE_STATS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    overrides = " ".join(f"{k}={toml_value(v)}" for k, v in run_config.items())
    federation = f"num-supernodes={num_supernodes} client-resources-num-cpus=1"
    cmd = [FLWR, "run", ".", "--stream", "--run-config", overrides, "--federation-config", federation]
    try:
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        stop_superlink(home)
