"""fedapp's warm ClientApp runtime (fedapp.deploy.warm_runtime) on a real deployment: SuperLink behind
its proxy and SuperNodes on 127.0.0.1, started by `fedapp deploy`, `flwr run` against them.

* it gives the same runs as Flower's own process per message (rows without timing keys, model.npz);
* a message whose handler raises, calls ``sys.exit`` or ``os._exit`` costs that message alone: the
  round names the node, the runtime's processes live on, the next round trains it again;
* a second run with a changed app bundle runs the new code, not the template of the old one;
* the runtime's long-lived processes keep their memory over 100 messages, each of which ran in a
  process of its own forked from one template;
* stopping the SuperNode leaves no process behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.deploy_harness import Federation, cmdline, descendants, rows, stop_group
from tests.flwr_harness import copy_checkout, shared_checkout
from tests.run_rows import outcome_rows

pytestmark = pytest.mark.flwr

FAULTY = 1
RUN = {
    "num-clients": 2, "dataset": "digits", "partition": "0,1,2,3,4|5,6,7,8,9", "local-steps": 3, "lr": 0.3,
    "round-timeout": 60.0, "min-replies": 1,
}  # fmt: skip
TIERS = {0: ["--active-fraction", "1.0"], 1: ["--active-fraction", "0.4"]}  # FedSPU's share of neurons per node
# node 1's device, as its owner would break it: the train message of round r does plan[r]
FAULTS = """
import json, os, sys
import flwr.clientapp.client_app as _client_app

_call = _client_app.ClientApp.__call__


def _faulty_call(self, message, context):
    plan = json.loads(open(os.environ["FEDAPP_TEST_FAULTS"]).read())
    rnd = str(message.content["config"]["server-round"]) if message.metadata.message_type == "train" else ""
    action = plan.get(rnd)
    if action == "raise":
        raise RuntimeError("injected fault in round " + rnd)
    if action == "exit":
        sys.exit(3)
    if action == "os_exit":
        os._exit(4)
    return _call(self, message, context)


_client_app.ClientApp.__call__ = _faulty_call
"""


def runtime_processes(fed: Federation, i: int) -> dict[int, str]:
    """Node ``i``'s warm runtime processes (root and templates), by pid."""
    return {p: cmdline(p) for p in descendants(fed.nodes[i].pid) if "fedapp.deploy.warm_runtime" in cmdline(p)}


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    tmp = tmp_path_factory.mktemp("warm")
    (tmp / "faults").mkdir()
    (tmp / "faults" / "sitecustomize.py").write_text(FAULTS)
    (tmp / "plan.json").write_text("{}")
    env = {"PYTHONPATH": str(tmp / "faults"), "FEDAPP_TEST_FAULTS": str(tmp / "plan.json")}
    federation = Federation(tmp, 2, runtime="warm", node_env={FAULTY: env}, node_args=TIERS)
    try:
        yield federation.start()
    finally:
        federation.stop()


@pytest.fixture(scope="module")
def flower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    federation = Federation(tmp_path_factory.mktemp("flwr"), 2, runtime="flower", node_args=TIERS)  # "flwr": a run-dir as long as warm's
    try:
        yield federation.start()
    finally:
        federation.stop()


@pytest.mark.parametrize("method", ["fedavg", "fedspu"])
def test_the_warm_runtime_gives_flower_runtime_s_runs(warm: Federation, flower: Federation, method: str) -> None:
    cfg = {**RUN, "method": method, "num-server-rounds": 3}
    procs = [(fed, fed.submit({**cfg, "run-dir": str(fed.tmp / method)}, f"run-{method}")) for fed in (warm, flower)]  # side by side
    for fed, proc in procs:
        try:
            proc.wait(timeout=900)
        finally:
            stop_group(proc)
            fed.runs.remove(proc)
        log = (fed.tmp / f"run-{method}.log").read_text(errors="replace")
        assert [r["round"] for r in rows(fed.tmp / method)] == [1, 2, 3], log[-3000:]
        assert all(r["clients"] == 2 for r in rows(fed.tmp / method))
    assert outcome_rows(warm.tmp / method) == outcome_rows(flower.tmp / method)
    with np.load(warm.tmp / method / "model.npz") as a, np.load(flower.tmp / method / "model.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            assert np.array_equal(a[k], b[k]), k
    assert "is warm" in warm.log(f"node-{FAULTY}") and "is warm" not in flower.log(f"node-{FAULTY}")


def test_a_raising_exiting_or_crashing_message_costs_that_message_alone(warm: Federation) -> None:
    (warm.tmp / "plan.json").write_text(json.dumps({"2": "raise", "3": "exit", "4": "os_exit"}))
    before = runtime_processes(warm, FAULTY)
    run_dir = warm.tmp / "faults-run"
    try:
        log = warm.run({**RUN, "num-server-rounds": 5, "run-dir": str(run_dir)}, "run-faults")
    finally:
        (warm.tmp / "plan.json").write_text("{}")
    out = rows(run_dir)
    assert [r["round"] for r in out] == [1, 2, 3, 4, 5], log[-3000:]
    assert [(r["clients"], r["failed_pids"]) for r in out] == [(2, []), (1, [FAULTY]), (1, [FAULTY]), (1, [FAULTY]), (2, [])]
    assert "injected fault in round 2" in out[1]["failure_reasons"][0]
    after = runtime_processes(warm, FAULTY)
    assert before and set(before) <= set(after), (before, after)  # the root and the template survived all three


def test_a_changed_app_bundle_runs_its_own_code(warm: Federation, tmp_path: Path) -> None:
    changed = copy_checkout(tmp_path / "app")
    handlers = changed / "fedapp" / "client" / "handlers.py"
    marker = f"BUNDLE-CHANGED-{os.getpid()}"
    handlers.write_text(handlers.read_text() + f"\nprint({marker!r}, flush=True)\n")
    for app, name in ((shared_checkout(), "same"), (changed, "changed")):
        run_dir = warm.tmp / f"bundle-{name}"
        proc = warm.submit({**RUN, "num-server-rounds": 2, "run-dir": str(run_dir)}, f"run-bundle-{name}", app=app)
        try:
            proc.wait(timeout=600)
        finally:
            stop_group(proc)
            warm.runs.remove(proc)
        assert [r["round"] for r in rows(run_dir)] == [1, 2]
        assert (marker in warm.log("node-0")) == (name == "changed")
    shutil.rmtree(changed, ignore_errors=True)


PROBE_APP = '''
"""A Flower app that sends one node 100 query messages at once (the node answers them one after another);
each reply says which process answered it, its parent, and the memory of the runtime's template and root
at that moment."""
import json, os, time
from pathlib import Path
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

client = ClientApp()
server = ServerApp()


def rss_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


@client.query()
def query(msg: Message, context: Context) -> Message:
    template = os.getppid()
    root = int(Path(f"/proc/{template}/stat").read_text().rsplit(")", 1)[1].split()[1])
    out = {"pid": os.getpid(), "template": template, "root": root, "template_kb": rss_kb(template), "root_kb": rss_kb(root),
           "at": time.time()}
    return Message(RecordDict({"r": ConfigRecord(out)}), reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    nodes = []
    while not nodes:
        nodes = list(grid.get_node_ids())
        time.sleep(1)
    msgs = [
        Message(RecordDict({"c": ConfigRecord({"k": k})}), dst_node_id=sorted(nodes)[0], message_type="query")
        for k in range(int(context.run_config["messages"]))
    ]
    replies = grid.send_and_receive(msgs, timeout=900)  # all at once: the node takes them one after another
    seen = sorted((dict(r.content["r"]) for r in replies if not r.has_error()), key=lambda r: r["at"])
    Path(str(context.run_config["out"])).write_text(json.dumps(seen))
'''
PROBE_TOML = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
[project]
name = "warmprobe"
version = "1.0.0"
dependencies = []
[tool.hatch.build.targets.wheel]
packages = ["."]
[tool.flwr.app]
publisher = "tests"
[tool.flwr.app.components]
serverapp = "probe_app:server"
clientapp = "probe_app:client"
[tool.flwr.app.config]
messages = 100
out = ""
"""


def test_runtime_memory_is_flat_over_100_messages_each_in_its_own_process(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("warm-probe")
    app = tmp / "probe"
    app.mkdir()
    (app / "probe_app.py").write_text(PROBE_APP)
    (app / "pyproject.toml").write_text(PROBE_TOML)
    fed = Federation(tmp, 1, runtime="warm", node_args={0: ["--runtime-poll-interval", "0.05"]})
    alive: list[int] = []
    try:
        fed.start()
        proc = fed.submit({"out": str(tmp / "seen.json")}, "run-probe", app=app)
        proc.wait(timeout=900)
        seen = json.loads((tmp / "seen.json").read_text())
        assert len(seen) == 100
        assert len({s["pid"] for s in seen}) == 100  # a process per message
        assert len({s["template"] for s in seen[1:]}) == 1  # the first is cold (forked from the root); then one template
        root = seen[1]["root"]
        assert {s["root"] for s in seen[1:]} == {root} and seen[0]["template"] == root  # the cold one's parent is the root
        for key in ("template_kb", "root_kb"):
            grown = seen[-1][key] - seen[10][key]
            assert grown < 2048, f"{key}: {seen[10][key]} kB at message 11, {seen[-1][key]} kB at message 100"
        alive += [p for p in (root, seen[-1]["template"]) if "warm_runtime" in cmdline(p)]
        assert len(alive) == 2, "the root and the template run between messages"
        supervisor = fed.nodes.pop(0)  # the SuperNode stops as an operator stops it: SIGTERM to `fedapp deploy supernode`
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(timeout=60)
        Federation.wait_for(lambda: not [p for p in alive if "warm_runtime" in cmdline(p)], 30, "the runtime's processes to end")
    finally:
        fed.stop()
        for pid in alive:  # what a failed check above left running: ours, by pid and command line
            if "warm_runtime" in cmdline(pid):
                os.kill(pid, signal.SIGKILL)
