"""fedapp's round under `flwr run` against a bare Flower app doing the same training, in one run.

The user's alternative to fedapp is a Flower app of their own. The bare app here is what the
Flower quickstart leads to, for the same work as fedapp's FedAvg on digits: stock ``FedAvg``
(``fraction_evaluate = 0``), the same 3-conv CNN, scikit-learn's digits with the same
stratified 497-image test set, an IID split into ``--clients`` equal shares, SGD (lr 0.05,
batch 32, shuffled, ``--epochs`` local epochs), and the server's central evaluation on the test
set each round (``evaluate_fn``). fedapp runs ``dataset = digits, model = cnn, partition = iid``
with the same numbers (its defaults otherwise: energy meter, metrics rows, checkpoint).

Both run on the same federation (``--clients`` SuperNodes, one CPU each, Flower's Ray
simulation), each with its own FLWR_HOME and ports, alternating bare / fedapp ``--repeats``
times. A round's time is the gap between two consecutive round ends, both polled on disk the
same way (a line in fedapp's metrics.jsonl, a line the bare app's ``evaluate_fn`` writes);
rounds 2.. (round 1 includes the workers' imports and data loading). Printed: each app's mean
round, its median, and the ratio fedapp / bare: what fedapp adds to Flower's own round.

    python bench/flwr_vs_bare.py [--clients 20] [--rounds 8] [--epochs 1] [--repeats 1] [--keep]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from startup import copy_app, flwr_env, write_app  # noqa: E402

from tests.flwr_harness import stop_superlink, toml_value  # noqa: E402

TASK = '''\
"""The CNN and data a user would write for digits: sklearn's load_digits, a stratified test split."""
from functools import cache

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def model() -> nn.Module:
    torch.manual_seed(0)
    layers, c = [], 1
    for width in (32, 64, 128):
        layers += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        c = width
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(128, 10))


@cache  # once per process: the server's evaluation reads it every round
def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    train, test = train_test_split(np.arange(len(x)), test_size=497, stratify=d.target, random_state=0)
    return x[train], d.target[train], x[test], d.target[test]


def partition(pid: int, num: int) -> TensorDataset:
    x, y, _, _ = split()
    share = np.array_split(np.random.default_rng(0).permutation(len(x)), num)[pid]
    return TensorDataset(torch.from_numpy(x[share]), torch.from_numpy(y[share]))


def train(net: nn.Module, data: TensorDataset, epochs: int) -> float:
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    loss = torch.tensor(0.0)
    for _ in range(epochs):
        for x, y in DataLoader(data, batch_size=32, shuffle=True):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
    return loss.item()


def accuracy(net: nn.Module) -> float:
    _, _, x, y = split()
    with torch.no_grad():
        return float((net(torch.from_numpy(x)).argmax(1) == torch.from_numpy(y)).float().mean())
'''

CLIENT = """\
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from bare_task import model, partition, train

torch.set_num_threads(1)
app = ClientApp()
DATA = {}


@app.train()
def fit(msg: Message, context: Context) -> Message:
    pid = int(context.node_config["partition-id"])
    if pid not in DATA:
        DATA[pid] = partition(pid, int(context.node_config["num-partitions"]))
    net = model()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    loss = train(net, DATA[pid], int(context.run_config["local-epochs"]))
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(DATA[pid])})
    return Message(content=RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}), reply_to=msg)
"""

SERVER = """\
import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from bare_task import accuracy, model

torch.set_num_threads(1)
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    marker = Path(str(context.run_config["marker"]))

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        net = model()
        net.load_state_dict(arrays.to_torch_state_dict())
        acc = accuracy(net)
        with marker.open("a") as fh:
            fh.write(f"{server_round} {acc:.4f} {time.time()}\\n")
        return MetricRecord({"accuracy": acc})

    n = int(context.run_config["num-server-rounds"])
    FedAvg(fraction_evaluate=0.0).start(grid, ArrayRecord(model().state_dict()), num_rounds=n, evaluate_fn=evaluate)
"""


def write_bare_app(folder: Path) -> Path:
    config = {"num-server-rounds": 2, "num-clients": 20, "local-epochs": 1, "marker": ""}
    modules = {"bare_task.py": TASK, "bare_client.py": CLIENT, "bare_server.py": SERVER}
    return write_app(folder, "baredigits", ["flwr[simulation]", "torch", "scikit-learn"], config, modules)


def rounds_done(path: Path) -> int:
    """Rounds ended so far: complete lines in ``path`` but the bare app's round 0 (the initial model's evaluation)."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    return sum(1 for line in text.splitlines(keepends=True) if line.endswith("\n") and not line.startswith("0 "))


def launch(kind: str, app: Path, work: Path, args: argparse.Namespace) -> list[float]:
    """`flwr run` ``app`` on ``args.clients`` SuperNodes; returns the times (s since launch) at which each round ended."""
    home, out = work / "flwr-home", work / "out"
    out.mkdir(parents=True)
    env = flwr_env(home, work.parent / "index-cache")
    common = {"num-server-rounds": args.rounds, "local-epochs": args.epochs, "num-clients": args.clients}
    if kind == "bare":
        config, done = {**common, "marker": str(out / "marker")}, out / "marker"
    else:
        fedapp = {"dataset": "digits", "model": "cnn", "partition": "iid", "lr": 0.05, "batch-size": 32}
        config = {**common, **fedapp, "run-dir": str(out / "run")}
        done = out / "run" / "metrics.jsonl"
    overrides = " ".join(f"{k}={toml_value(v)}" for k, v in config.items())
    cmd = [str(Path(sys.executable).with_name("flwr")), "run", str(app), "--stream", "--run-config", overrides,
           "--federation-config", f"num-supernodes={args.clients} client-resources-num-cpus=1"]  # fmt: skip
    ends: list[float] = []
    with (work / "flwr.log").open("w") as log:
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
            while True:
                running = proc.poll() is None
                now = time.perf_counter() - start
                ends += [now] * (rounds_done(done) - len(ends))
                if not running:
                    break
                time.sleep(0.01)
        finally:
            stop_superlink(home)
    if len(ends) != args.rounds:  # `flwr run --stream` exits 0 when the ServerApp fails: the rounds decide
        log_text = (work / "flwr.log").read_text()[-3000:]
        sys.exit(f"{kind}: {len(ends)} of {args.rounds} rounds finished; log: {work / 'flwr.log'}\n{log_text}")
    return ends


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs) and print its path")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fedapp-vs-bare-"))
    try:
        apps = {"bare Flower": ("bare", write_bare_app(tmp / "bareapp")), "fedapp": ("fedapp", copy_app(ROOT, tmp / "fedapp"))}
        rounds: dict[str, list[float]] = {name: [] for name in apps}
        print(f"load average before: {os.getloadavg()}")
        for rep in range(args.repeats):  # interleaved, so a load swing hits both
            for name, (kind, app) in apps.items():
                ends = launch(kind, app, tmp / f"{kind}-{rep}", args)
                rounds[name] += [b - a for a, b in itertools.pairwise(ends)]
                print(f"{name} run {rep + 1}: round 1 ended {ends[0]:.1f} s after launch, round {args.rounds} at {ends[-1]:.1f} s")
        print(f"load average after: {os.getloadavg()}")
        print(
            f"\nflwr run: {args.clients} SuperNodes (1 CPU each), FedAvg, CNN on digits, {args.epochs} local epoch(s), "
            f"{args.rounds} rounds, {args.repeats} run(s) per app; rounds 2.."
        )
        print(f"{'app':<14}{'mean round s':>14}{'median s':>10}{'min s':>8}{'max s':>8}")
        for name, rs in rounds.items():
            print(f"{name:<14}{statistics.mean(rs):>14.3f}{statistics.median(rs):>10.3f}{min(rs):>8.3f}{max(rs):>8.3f}")
        bare, fed = rounds["bare Flower"], rounds["fedapp"]
        print(
            f"fedapp / bare Flower: mean {statistics.mean(fed) / statistics.mean(bare):.2f}, "
            f"median {statistics.median(fed) / statistics.median(bare):.2f}"
        )
    finally:
        if args.keep:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
