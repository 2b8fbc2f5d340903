"""The processes of the warm ClientApp runtime (fedapp.deploy.warm_runtime): templates and tasks.

A *template* is forked from the runtime's root once per app bundle (FAB hash) and loads that
bundle's ClientApp (and the modules the bundle names in ``[tool.fedapp.runtime] preload``)
exactly as Flower's loader would in a fresh process. Every task of that bundle then runs in a
process forked from the template: Flower's own ``run_clientapp`` with the task's token, so the
message, the reply, the error reply of a raising handler and the task status are Flower's.

What a forked task must not inherit from its parent, and is reset here: Flower's exit handlers
(the root's would close the root's client and templates), signal handlers, the torch default
generator's state (restored to a fresh interpreter's), and Python's and NumPy's global random
state (re-seeded from the OS, as a fresh interpreter's are). Each process asks the kernel to kill
it when its parent dies (``PR_SET_PDEATHSIG``), so nothing outlives the runtime.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import random
import select
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
FRESH_TORCH_RNG: Any = None  # the torch default generator's state before anything ran (set by the root)


@dataclass(frozen=True)
class Dial:
    """How a task process reaches the SuperNode's Runtime API."""

    address: str
    insecure: bool
    certificates: bytes | None
    root_pid: int


@dataclass(frozen=True)
class Bundle:
    """One app bundle, as Flower names it (its loader's arguments)."""

    fab_id: str
    fab_version: str
    fab_hash: str


def die_with_parent() -> None:
    """SIGKILL this process when the process that forked it exits (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def fresh_process_state(reset_torch: bool) -> None:
    """What a forked process must not inherit (module docstring). ``reset_torch``: the torch generator
    as a fresh interpreter has it, for a process that imports the bundle itself (a template, a cold
    task); a template's task keeps the template's, which is a fresh interpreter's after that import."""
    from flwr.supercore.exit import exit_handler

    exit_handler.registered_exit_handlers.clear()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if reset_torch and FRESH_TORCH_RNG is not None:
        sys.modules["torch"].set_rng_state(FRESH_TORCH_RNG)


def install_loader_hook(on_load: Callable[[Bundle], None], warm: tuple[Bundle, Any] | None) -> None:
    """Route Flower's ClientApp loading in this process through ``warm`` (the template's bundle and
    its loaded ClientApp, used only for that exact FAB hash) and report each bundle loaded."""
    import flwr.supernode.runtime.run_clientapp as rc

    flower_loader_fn = rc.get_load_client_app_fn
    flower_install = rc.install_from_fab

    def get_load_client_app_fn(default_app_ref: str, app_path: str | None, multi_app: bool) -> Callable[[str, str, str], Any]:
        flower_load = flower_loader_fn(default_app_ref=default_app_ref, app_path=app_path, multi_app=multi_app)

        def load(fab_id: str, fab_version: str, fab_hash: str) -> Any:
            bundle = Bundle(fab_id, fab_version, fab_hash)
            app = warm[1] if warm is not None and warm[0] == bundle else flower_load(fab_id, fab_version, fab_hash)
            on_load(bundle)
            return app

        return load

    def install_from_fab(content: bytes, *args: Any, **kwargs: Any) -> Any:
        """The template's bundle is installed and loaded already: skip re-verifying its files."""
        if warm is not None and hashlib.sha256(content).hexdigest() == warm[0].fab_hash:
            return None
        return flower_install(content, *args, **kwargs)

    rc.get_load_client_app_fn = get_load_client_app_fn  # type: ignore[assignment]
    rc.install_from_fab = install_from_fab  # type: ignore[assignment]


def run_task(token: str, dial: Dial) -> NoReturn:
    """Flower's ClientApp runtime for one task, in this (forked) process; never returns."""
    code = 1
    try:
        from flwr.supernode.runtime.run_clientapp import run_clientapp

        run_clientapp(
            runtime_api_address=dial.address, token=token, insecure=dial.insecure, certificates=dial.certificates,
            parent_pid=dial.root_pid, runtime_dependency_install=False,
        )  # fmt: skip
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def fork_task(token: str, dial: Dial, report_fd: int | None, warm: tuple[Bundle, Any] | None) -> int:
    """Fork a process that runs one task; returns its pid. A cold task (no ``warm`` template) writes
    the bundle it loaded to ``report_fd``, so the root can make that bundle's template."""
    pid = os.fork()
    if pid:
        return pid
    try:
        die_with_parent()
        fresh_process_state(reset_torch=warm is None)

        def report(bundle: Bundle) -> None:
            if report_fd is not None:
                line = f"{bundle.fab_id}\t{bundle.fab_version}\t{bundle.fab_hash}\n".encode()
                os.write(report_fd, line)

        install_loader_hook(report, warm)
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    run_task(token, dial)


def preload_bundle(bundle: Bundle) -> Any:
    """Load ``bundle``'s ClientApp as Flower's loader does, then the modules it asks to keep warm."""
    import importlib

    import tomli
    from flwr.clientapp.utils import get_load_client_app_fn
    from flwr.common.config import get_project_dir

    app = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)(bundle.fab_id, bundle.fab_version, bundle.fab_hash)
    project = get_project_dir(bundle.fab_id, bundle.fab_version, bundle.fab_hash)
    config = tomli.loads((Path(project) / "pyproject.toml").read_text(encoding="utf-8"))
    for name in config.get("tool", {}).get("fedapp", {}).get("runtime", {}).get("preload", []):
        importlib.import_module(str(name))
    return app


def template_main(bundle: Bundle, dial: Dial, tokens_fd: int) -> NoReturn:
    """A template's life: load the bundle, then fork one task per token line read from ``tokens_fd``
    until it closes (the root retired this template), then wait for the tasks still running."""
    die_with_parent()
    children: set[int] = set()

    def stop(signum: int, _frame: Any) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        os._exit(0)

    fresh_process_state(reset_torch=True)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        app = preload_bundle(bundle)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():  # a fork of it could not use CUDA: serve no task
            raise RuntimeError("loading the bundle started CUDA in the template; its tasks start cold")
    except BaseException:
        print(f"fedapp warm runtime: bundle {bundle.fab_hash[:12]} could not be preloaded; its tasks start cold", file=sys.stderr)
        traceback.print_exc()
        os._exit(3)
    print(f"fedapp warm runtime: bundle {bundle.fab_id} {bundle.fab_version} ({bundle.fab_hash[:12]}) is warm", file=sys.stderr, flush=True)
    buffer = b""
    with os.fdopen(tokens_fd, "rb", buffering=0) as tokens:
        while True:
            ready, _, _ = select.select([tokens], [], [], 1.0)
            reap(children)
            if not ready:
                continue
            chunk = tokens.read(65536)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                children.add(fork_task(line.decode(), dial, None, (bundle, app)))
    while children:
        pid, _ = os.wait()
        children.discard(pid)
    os._exit(0)


def reap(children: set[int]) -> list[tuple[int, int]]:
    """Collect the children of ``children`` that have exited: (pid, exit status)."""
    done = []
    for pid in list(children):
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            got, status = pid, 0
        if got:
            children.discard(pid)
            done.append((pid, status))
    return done
