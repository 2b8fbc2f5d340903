"""fedapp's warm ClientApp runtime: what runs each message beside a SuperNode started with
``--isolation process``, in place of Flower's ``flower-superexec``.

Flower's runtime starts a fresh ``flwr-clientapp`` interpreter per message. On a small device that
start (Python, flwr, torch, the app, and the teardown) costs seconds of CPU and about a gigabyte,
against a fraction of a second of training, so a method that spares a device compute spares it
almost nothing. This runtime asks the SuperNode's Runtime API for tasks exactly as
``flower-superexec`` does (the same request, Flower's own exec plugin), but launches each ClientApp
task in a process *forked* from one that has everything loaded already:

* the root (this process) imports flwr's ClientApp runtime, torch (with ``torch._dynamo``, which
  torch's optimizers import on their first step), NumPy and the installed app's third-party
  dependencies, then forgets the installed app's own modules, so that no bundle runs them;
* per app bundle (FAB hash) a template (fedapp.deploy.warm_fork) loads that bundle's ClientApp once;
  its tasks are forked from it. A bundle's first task is forked from the root and loads the bundle
  itself; once it has shown where the bundle is installed, the template is made. A template serves
  only the exact hash it loaded; a new bundle retires the old template once its tasks are done;
* every task runs Flower's ``run_clientapp`` with its own token in its own process: a handler that
  raises gets Flower's error reply, and an exit or crash ends that process alone.

The root never starts CUDA (it only imports torch). A task on a GPU node creates its own CUDA
context, as under Flower's runtime (docs/deploy.md, "Warm runtime").
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from fedapp.deploy import warm_fork
from fedapp.deploy.warm_fork import Bundle, Dial

DEFAULT_PRELOAD = (
    "torch", "torch._dynamo", "numpy", "numpy.ma", "sklearn.datasets", "flwr.supernode.runtime.run_clientapp", "flwr.clientapp", "tomli",
    "fedapp.client_app", "fedapp.client.handlers", "fedapp.client.node_query",
)  # fmt: skip
APP_PACKAGES = ("fedapp", "client_app", "server_app")  # the bundle brings its own copies of these
POLL_INTERVAL_S = 1.0  # flower-superexec's default


def preload(modules: Sequence[str]) -> list[str]:
    """Import ``modules`` (a missing optional one is skipped), then drop the app's own modules from
    ``sys.modules``; returns the ones skipped."""
    skipped = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            skipped.append(name)
        if name == "torch" and warm_fork.FRESH_TORCH_RNG is None:  # before anything else could draw from it
            warm_fork.FRESH_TORCH_RNG = sys.modules["torch"].get_rng_state()
    for name in list(sys.modules):
        if name.split(".")[0] in APP_PACKAGES and name != __name__ and not name.startswith("fedapp.deploy.warm"):
            del sys.modules[name]
    return skipped


class ForkExecutor:
    """Flower's SuperExec executor interface (``get_eligible_capacity``, ``launch``, ``reconcile``,
    ``close``), launching ClientApp tasks by fork; other task types go to Flower's subprocess executor."""

    def __init__(self, dial: Dial) -> None:
        from flwr.supercore.superexec.executor import SubprocessExecutor

        self.dial = dial
        self.flower = SubprocessExecutor()
        self.templates: dict[str, tuple[int, int]] = {}  # fab hash -> (template pid, its token pipe)
        self.retired: set[int] = set()  # templates finishing their last tasks
        self.failed: set[str] = set()  # bundles whose template could not load them: their tasks start cold
        self.cold: set[int] = set()  # tasks forked from the root
        self.report_r, self.report_w = os.pipe()
        os.set_blocking(self.report_r, False)
        self.pending = b""

    def get_eligible_capacity(self, supported_task_types: set[Any], **_: Any) -> tuple[set[Any], set[str]]:
        return supported_task_types, set()

    def wait_for_capacity(self, task_type: Any = None, **_: Any) -> None:
        return None

    def launch(self, spec: Any) -> Any:
        from flwr.supercore.constant import TaskType
        from flwr.supercore.superexec.executor import LaunchResult

        if spec.task_type != TaskType.CLIENT_APP:
            return self.flower.launch(spec)
        template = self.templates.get(spec.fab_hash or "")
        if template is not None:
            try:
                os.write(template[1], f"{spec.token}\n".encode())
                return LaunchResult.accepted()
            except OSError:  # the template is gone: forget it, start this task cold
                self._retire(spec.fab_hash)
        self.cold.add(warm_fork.fork_task(spec.token, self.dial, self.report_w, None))
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        """Reap finished processes; make the template of each bundle a cold task has loaded."""
        warm_fork.reap(self.cold)
        for pid, status in warm_fork.reap(self.retired | {p for p, _ in self.templates.values()}):
            self.retired.discard(pid)
            for fab_hash, (tpid, fd) in list(self.templates.items()):
                if tpid == pid:
                    os.close(fd)
                    del self.templates[fab_hash]
                    if os.waitstatus_to_exitcode(status) != 0:
                        self.failed.add(fab_hash)
        with contextlib.suppress(BlockingIOError):
            self.pending += os.read(self.report_r, 65536)
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            fab_id, fab_version, fab_hash = line.decode().split("\t")
            if fab_hash not in self.templates and fab_hash not in self.failed:
                self._make_template(Bundle(fab_id, fab_version, fab_hash))

    def _make_template(self, bundle: Bundle) -> None:
        for old in list(self.templates):  # one bundle warm at a time: a new bundle replaces the old
            self._retire(old)
        tokens_r, tokens_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(tokens_w)
            os.close(self.report_r)
            os.close(self.report_w)
            warm_fork.template_main(bundle, self.dial, tokens_r)
        os.close(tokens_r)
        self.templates[bundle.fab_hash] = (pid, tokens_w)

    def _retire(self, fab_hash: str) -> None:
        """Close the template's token pipe: it exits once its running tasks are done."""
        pid, fd = self.templates.pop(fab_hash)
        os.close(fd)
        self.retired.add(pid)

    def close(self) -> None:
        import signal

        for pid in [*self.cold, *self.retired, *(p for p, _ in self.templates.values())]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def serve(dial: Dial, root_certificates_path: str | None, poll_interval: float) -> None:
    """flower-superexec's loop (Flower's client, request and exec plugin) over a ForkExecutor."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.exit import register_signal_handlers
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supercore.superexec.plugin import AutoExecPlugin
    from flwr.supercore.telemetry import EventType

    executor = ForkExecutor(dial)
    client = RuntimeHttpClient.from_server_address(
        server_address=dial.address, insecure=dial.insecure, root_certificates=dial.certificates,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")], retry_invoker=make_simple_http_retry_invoker(),
    )  # fmt: skip
    register_signal_handlers(
        event_type=EventType.RUN_SUPEREXEC_LEAVE, exit_message="fedapp warm runtime stopped.", exit_handlers=[client.close, executor.close]
    )
    plugin = AutoExecPlugin(
        runtime_api_address=dial.address, insecure=dial.insecure, root_certificates_path=root_certificates_path,
        runtime_dependency_install=False, executor=executor,  # type: ignore[arg-type]
    )  # fmt: skip
    while True:
        executor.reconcile()
        types, hashes = executor.get_eligible_capacity(set(plugin.supported_task_types))
        res = client.AcquireTask(AcquireTaskRequest(supported_task_types=types, agentapp_fab_hashes=hashes))
        if res.HasField("task") and res.token:
            plugin.launch_task(token=res.token, task=res.task)
        time.sleep(poll_interval)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedapp.deploy.warm_runtime", description=__doc__.split("\n\n")[0])
    p.add_argument("--runtime-api-address", required=True, help="the SuperNode's Runtime API (its --port), e.g. 127.0.0.1:9094")
    p.add_argument("--insecure", action="store_true", help="plain HTTP to the Runtime API (a SuperNode without --ssl-* files)")
    p.add_argument("--root-certificates", help="CA of the Runtime API's certificate (a SuperNode with --ssl-* files)")
    p.add_argument("--poll-interval", type=float, default=POLL_INTERVAL_S, help="seconds between task requests (default 1, as Flower's)")
    p.add_argument("--preload", default=",".join(DEFAULT_PRELOAD), help="comma-separated modules the root imports once")
    args = p.parse_args(argv)
    if args.insecure == bool(args.root_certificates):
        p.error("give exactly one of --insecure and --root-certificates")
    if not 0.01 <= args.poll_interval <= 60:
        p.error(f"--poll-interval {args.poll_interval}: expected 0.01 to 60 seconds")
    from flwr.supercore.tls import validate_and_resolve_root_certificates

    certificates = validate_and_resolve_root_certificates(args.root_certificates, args.insecure)
    skipped = preload([m for m in args.preload.split(",") if m])
    if skipped:
        print(f"fedapp warm runtime: not installed, not preloaded: {', '.join(skipped)}", file=sys.stderr)
    serve(Dial(args.runtime_api_address, args.insecure, certificates, os.getpid()), args.root_certificates, args.poll_interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
