"""Start-up cost of fedapp under `flwr run`, against a bare Flower app, in one run.

The bare app is what a new user writes from Flower's quickstart: stock ``FedAvg`` on a
tiny torch MLP (64-32-10) over random data, torch imported at the top of both apps,
generated into a temp folder. fedapp runs its defaults on digits (MLP, Dirichlet split)
from a copy of an app folder without a virtual environment inside (this checkout's
tracked files by default; ``--fedapp DIR`` for another, e.g. an older commit unpacked
with ``git archive``). Both get the same federation (``--clients`` SuperNodes, one CPU
each), 2 rounds, their own FLWR_HOME (so each starts its own local SuperLink) and ports.

Measured per app, alternating bare / fedapp ``--repeats`` times: seconds from launching
`flwr run` to the end of round 1 (the first metrics row / the bare app's round-1
evaluate_fn call, polled on disk) and to the end of the run. ``--in-place`` also runs
fedapp from this checkout as it is (a .venv inside is walked by Flower's FAB build),
and the FAB build time of each folder is printed.

Wall times on a shared machine swing by tens of seconds, so the CPU seconds of each
process's cold path are measured too, each in a fresh interpreter (``--cold-only``
skips the `flwr run` part): a client worker's (import the ClientApp, answer discovery
for fedapp, handle the first train message) and the server's (import the ServerApp and
get ready for round 1: fedapp's run-config, data, split and model, up to discovery).
fedapp keeps the digits split and Flower Datasets' partitions in an index cache
(``FEDAPP_CACHE_DIR``), which the server fills before it contacts any client: so the
server is measured with an empty cache (the first run of a split on a machine) and with
it filled (every later run), the worker with the cache the server filled. The `flwr run`
part uses one cache for the whole bench, filled by the cold paths first: later runs.

    python bench/startup.py [--clients 10] [--repeats 1] [--fedapp DIR ...] [--in-place] [--cold-only] [--cold-repeats 3] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.flwr_harness import free_port, stop_superlink, toml_value  # noqa: E402

APP_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
dependencies = [{dependencies}]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "bench"

[tool.flwr.app.components]
serverapp = "bare_server:app"
clientapp = "bare_client:app"

[tool.flwr.app.config]
{config}
"""

BARE_TASK = '''\
"""A tiny MLP on random 8x8 "images", 130 per client (about digits' share of 10 clients)."""
import numpy as np
import torch
from torch import nn


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def data(pid: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(pid)
    return torch.from_numpy(rng.random((130, 64), np.float32)), torch.from_numpy(rng.integers(0, 10, 130))


def train(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = torch.tensor(0.0)
    for i in range(0, len(x), 32):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x[i : i + 32]), y[i : i + 32])
        loss.backward()
        opt.step()
    return float(loss)
'''

BARE_CLIENT = """\
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from bare_task import data, model, train

torch.set_num_threads(1)
app = ClientApp()


@app.train()
def fit(msg: Message, context: Context) -> Message:
    net = model()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = data(int(context.node_config["partition-id"]))
    loss = train(net, x, y)
    content = RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": MetricRecord({"train_loss": loss, "num-examples": len(x)})})
    return Message(content=content, reply_to=msg)
"""

BARE_SERVER = """\
import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from bare_task import model

torch.set_num_threads(1)
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    marker = Path(str(context.run_config["marker"]))
    n = int(context.run_config["num-server-rounds"])

    def done(server_round: int, arrays: ArrayRecord) -> None:
        with marker.open("a") as fh:
            fh.write(f"{server_round} {time.time()}\\n")

    FedAvg(fraction_evaluate=0.0).start(grid, ArrayRecord(model().state_dict()), num_rounds=n, evaluate_fn=done)
"""


# Cold paths, each run by a fresh interpreter in the app's folder (so that folder's modules
# are the ones imported); they print the process's CPU seconds.
CLIENT_COLD = {
    "bare": """
import time; t0 = time.process_time()
import numpy as np
from flwr.app import ConfigRecord, MessageType, RecordDict
import bare_client
from fedapp.core import wire
from fedapp.engine.local_grid import LocalGrid
grid = LocalGrid(bare_client.app, {{}}, {clients})
content = RecordDict({{"arrays": wire.to_record(dict(np.load({arrays!r}))), "config": ConfigRecord({{}})}})
msg = grid.create_message(content, MessageType.TRAIN, 1000, "1")
assert not grid.send_and_receive([msg])[0].has_error()
print(time.process_time() - t0)
""",
    "fedapp": """
import time; t0 = time.process_time()
import numpy as np
from flwr.app import ConfigRecord, MessageType, RecordDict
import client_app
from fedapp.core import wire
from fedapp.engine.local_grid import LocalGrid
grid = LocalGrid(client_app.app, {raw!r}, {clients})
query = grid.create_message(RecordDict({{"config": ConfigRecord({{}})}}), MessageType.QUERY, 1000, "0")
assert not grid.send_and_receive([query])[0].has_error()
config = ConfigRecord({{"server-round": 1, "partition-id": 0}})
content = RecordDict({{"arrays": wire.to_record(dict(np.load({arrays!r}))), "config": config}})
reply = grid.send_and_receive([grid.create_message(content, MessageType.TRAIN, 1000, "1")])[0]
assert not reply.has_error(), reply.error
print(time.process_time() - t0)
""",
}
SERVER_COLD = {
    "bare": """
import time; t0 = time.process_time()
import bare_server
from flwr.app import ArrayRecord
ArrayRecord(bare_server.model().state_dict())
print(time.process_time() - t0)
""",
    "fedapp": """
import time; t0 = time.process_time()
import server_app
from fedapp.core.config import ConfigError
from fedapp.engine.local_grid import LocalGrid
from fedapp.server.loop import serve
class NoNodes(LocalGrid):
    def get_node_ids(self):
        return []
try:
    serve(NoNodes(None, {raw!r}, 0), {raw!r}, discovery_timeout=0.01)
except ConfigError:
    pass  # no node answered: everything before discovery has run
print(time.process_time() - t0)
""",
}
INITIAL = {
    "bare": """
import numpy as np, bare_task
np.savez({out!r}, **{{k: v.numpy() for k, v in bare_task.model().state_dict().items()}})
""",
    "fedapp": """
import numpy as np
from fedapp.data import dataset_for
from fedapp.methods.registry import resolve
from fedapp.models import build_model
cfg = resolve({raw!r})[0]
ds = dataset_for(cfg)
np.savez({out!r}, **{{k: v.numpy() for k, v in build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed).state_dict().items()}})
""",
}


def python(code: str, cwd: Path, cache: Path) -> str:
    env = {**os.environ, "PYTHONPATH": f"{cwd}{os.pathsep}{ROOT}", "FLWR_TELEMETRY_ENABLED": "0", "FEDAPP_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"cold path failed in {cwd}:\n{out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def cold_seconds(kind: str, app: Path, work: Path, clients: int, cache: Path) -> tuple[float, float, float]:
    """CPU seconds of a client worker's cold path and of the server's with ``cache`` (the index
    cache) empty and then filled, each in a fresh interpreter."""
    work.mkdir(parents=True, exist_ok=True)
    raw = {"num-clients": clients, "num-server-rounds": 2, "run-dir": str(work / "run"), "energy-meter": "auto"}
    arrays = str(work / "initial.npz")
    python(INITIAL[kind].format(raw=raw, out=arrays), app, work / "initial-cache")
    empty = work / "cache"
    server_first = float(python(SERVER_COLD[kind].format(raw=raw), app, empty))
    client = float(python(CLIENT_COLD[kind].format(raw=raw, arrays=arrays, clients=clients), app, empty))
    server_later = float(python(SERVER_COLD[kind].format(raw=raw), app, empty))
    if empty.exists():  # the bare app keeps no cache
        shutil.copytree(empty, cache, dirs_exist_ok=True)
    return client, server_first, server_later


def write_app(folder: Path, name: str, dependencies: list[str], config: dict[str, object], modules: dict[str, str]) -> Path:
    """A Flower app in ``folder``: its pyproject.toml (``bare_server:app``, ``bare_client:app``, the
    run-config defaults ``config``) and ``modules`` (file name -> source)."""
    folder.mkdir(parents=True)
    defaults = "\n".join(f"{k} = {toml_value(v)}" for k, v in config.items())
    pyproject = APP_PYPROJECT.format(name=name, dependencies=", ".join(f'"{d}"' for d in dependencies), config=defaults)
    for file, text in {"pyproject.toml": pyproject, **modules}.items():
        (folder / file).write_text(textwrap.dedent(text))
    return folder


def write_bare_app(folder: Path) -> Path:
    modules = {"bare_task.py": BARE_TASK, "bare_client.py": BARE_CLIENT, "bare_server.py": BARE_SERVER}
    return write_app(folder, "bareapp", ["flwr[simulation]", "torch"], {"num-server-rounds": 2, "marker": ""}, modules)


def copy_app(src: Path, dst: Path) -> Path:
    """The app folder without virtual environments, run folders, git data or caches."""
    skip = shutil.ignore_patterns(".venv", "runs", ".git", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache", ".pytest_cache")
    shutil.copytree(src, dst, ignore=skip)
    return dst


def fab_seconds(app: Path) -> float:
    from flwr.cli.build import build_fab_from_disk

    start = time.perf_counter()
    build_fab_from_disk(app)
    return time.perf_counter() - start


def first_round_done(kind: str, out: Path) -> bool:
    if kind == "bare":
        marker = out / "marker"
        return marker.exists() and any(line.split()[0] == "1" for line in marker.read_text().splitlines() if line.strip())
    metrics = out / "run" / "metrics.jsonl"
    return metrics.exists() and metrics.read_text().endswith("\n")


def flwr_env(home: Path, cache: Path) -> dict[str, str]:
    """The environment of one bench `flwr run`: its own FLWR_HOME and ports (so its own local SuperLink),
    a new local Ray, no dependency installation, fedapp's index cache at ``cache``."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLWR_HOME": str(home), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_DISABLE_USAGE_STATS": "1", "RAY_ADDRESS": "local",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()), "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
        "FEDAPP_CACHE_DIR": str(cache),
    }  # fmt: skip


def launch(kind: str, app: Path, work: Path, clients: int, cache: Path) -> tuple[float, float]:
    """`flwr run` ``app``; returns (seconds to the end of round 1, seconds to exit)."""
    home = work / "flwr-home"
    out = work / "out"
    out.mkdir(parents=True)
    env = flwr_env(home, cache)
    if kind == "bare":
        config = {"num-server-rounds": 2, "marker": str(out / "marker")}
    else:
        config = {"num-clients": clients, "num-server-rounds": 2, "run-dir": str(out / "run")}
    overrides = " ".join(f"{k}={toml_value(v)}" for k, v in config.items())
    cmd = [str(Path(sys.executable).with_name("flwr")), "run", str(app), "--stream", "--run-config", overrides,
           "--federation-config", f"num-supernodes={clients} client-resources-num-cpus=1"]  # fmt: skip
    log = (work / "flwr.log").open("w")
    start = time.perf_counter()
    first = float("nan")
    try:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            if first != first and first_round_done(kind, out):
                first = time.perf_counter() - start
            time.sleep(0.05)
        total = time.perf_counter() - start
        if first != first and first_round_done(kind, out):
            first = total
    finally:
        log.close()
        stop_superlink(home)
    if first != first:
        sys.exit(f"{kind}: no round finished; log: {work / 'flwr.log'}\n{(work / 'flwr.log').read_text()[-3000:]}")
    return first, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--fedapp", type=Path, action="append", help="fedapp app folder to copy and run (default: this checkout); repeat to compare several"
    )
    ap.add_argument("--in-place", action="store_true", help="also run fedapp from this checkout as it is (.venv inside)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs) and print its path")
    ap.add_argument("--cold-only", action="store_true", help="only the CPU seconds of the cold paths (no flwr run)")
    ap.add_argument("--cold-repeats", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fedapp-startup-"))
    try:
        bare = write_bare_app(tmp / "bareapp")
        folders = args.fedapp or [ROOT]
        apps = {"bare Flower": ("bare", bare)}
        for i, folder in enumerate(folders):
            name = "fedapp" if len(folders) == 1 else f"fedapp:{folder.resolve().name}"
            apps[name] = ("fedapp", copy_app(folder.resolve(), tmp / f"fedapp-{i}"))
        if args.in_place:
            apps["fedapp in place"] = ("fedapp", ROOT)
        cache = tmp / "index-cache"
        samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in apps}
        for rep in range(args.cold_repeats):  # interleaved, so a load swing hits every app
            for name, (kind, app) in apps.items():
                folder = tmp / "cold" / f"{name.replace(':', '-').replace(' ', '-')}-{rep}"
                samples[name].append(cold_seconds(kind, app, folder, args.clients, cache))
        cold = {n: tuple(statistics.median(c[i] for c in v) for i in range(3)) for n, v in samples.items()}
        print(f"cold paths, CPU seconds in a fresh interpreter ({args.clients} clients; median of {args.cold_repeats})")
        print(f"{'app':<24}{'client worker':>14}{'server, first run':>19}{'server, later runs':>20}")
        for name, (c, first, later) in cold.items():
            print(f"{name:<24}{c:>14.2f}{first:>19.2f}{later:>20.2f}")
        bare_cold = cold["bare Flower"]
        for name in cold:
            if name != "bare Flower":
                dc, df, dl = (cold[name][i] - bare_cold[i] for i in range(3))
                print(f"{name}: {dc:+.2f} s per client worker, {df:+.2f} s on the server on a split's first run, {dl:+.2f} s later")
        if args.cold_only:
            return
        fab = {name: fab_seconds(app) for name, (_, app) in apps.items()}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in apps}
        for rep in range(args.repeats):
            for name, (kind, app) in apps.items():
                times[name].append(launch(kind, app, tmp / f"{name.replace(' ', '-').replace(':', '-')}-{rep}", args.clients, cache))
        print(f"\nflwr run: {args.clients} SuperNodes (1 CPU each), 2 rounds, {args.repeats} run(s) per app (median)")
        print(f"{'app':<24}{'FAB build s':>12}{'to round 1 s':>14}{'total s':>10}")
        med = {n: (statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)) for n, ts in times.items()}
        for name in apps:
            print(f"{name:<24}{fab[name]:>12.2f}{med[name][0]:>14.1f}{med[name][1]:>10.1f}")
        base = med["bare Flower"][0]
        for name in apps:
            if name != "bare Flower":
                print(f"{name}: start to round 1 adds {med[name][0] - base:+.1f} s to the bare app's (ratio {med[name][0] / base:.2f})")
    finally:
        if args.keep:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
