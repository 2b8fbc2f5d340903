"""One FedAvg round through the in-process engine against a plain PyTorch loop, same device.

Workload (the GPU issue's): C clients x S samples of 3x32x32 images (CIFAR-10-format files
with random pixels, written to a temporary folder), one local epoch, batch 32, plain SGD
(lr 0.05, no momentum), the project's ``cnn`` and ``resnet8``. The plain loop is what a
hand-written simulation would do: every client's data on the device once, then per client
load the global weights, shuffle, train, and add the result to a running average on the
device. The engine runs the unchanged ServerApp + ClientApp (fedapp run) for two rounds;
round 1 pays one-off costs (model build, data to the device), round 2 is the steady state.
Ratio = engine round / plain round, both measured in this one run (goal on a GPU: <= 1.25);
the plain round is timed just before and just after the engine run and averaged, so a
machine whose load drifts shifts both sides alike.

    python bench/gpu_round.py --device cuda                  # 50 clients x 512, both models
    python bench/gpu_round.py --device cpu --clients 8       # what fits a small CPU
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedapp.core.config import RunConfig  # noqa: E402
from fedapp.core.device import describe, pick  # noqa: E402
from fedapp.core.runtime import configure_threads  # noqa: E402
from fedapp.data import client_data, dataset_for  # noqa: E402
from fedapp.methods.registry import resolve  # noqa: E402
from fedapp.models import build_model  # noqa: E402
from fedapp.sim.run_local import full_config, run_local  # noqa: E402
from tests.data_files import write_cifar10  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PlainLoop:
    """The hand-written reference: every client's data on the device once, then per round and
    client: load the global weights, shuffle, train, add the result to a running sum."""

    def __init__(self, cfg: RunConfig, device: torch.device):
        ds = dataset_for(cfg)
        self.cfg, self.device = cfg, device
        self.data = []
        for pid in range(cfg.num_clients):
            d = client_data(cfg, pid)
            self.data.append((torch.from_numpy(d.x_train).to(device), torch.from_numpy(d.y_train).to(device)))
        self.model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed).to(device)
        self.start = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.round()  # warm-up: kernels, allocator, autotuning

    def round(self) -> float:
        """Seconds of one round over every client."""
        sync(self.device)
        t0 = time.perf_counter()
        total = {k: torch.zeros_like(v, dtype=torch.float32) for k, v in self.start.items()}
        loss_fn = nn.CrossEntropyLoss()
        for pid, (x, y) in enumerate(self.data):
            self.model.load_state_dict(self.start)
            opt = torch.optim.SGD(self.model.parameters(), lr=self.cfg.lr)
            order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(pid)).to(self.device)
            self.model.train()
            for idx in order.split(self.cfg.batch_size):
                opt.zero_grad(set_to_none=True)
                loss_fn(self.model(x[idx]), y[idx]).backward()
                opt.step()
            for k, v in self.model.state_dict().items():
                total[k] += v.float()
        sync(self.device)
        return time.perf_counter() - t0


def engine_rounds(overrides: dict[str, object], run_dir: Path) -> list[float]:
    out = run_local({**overrides, "run-dir": str(run_dir)})
    return [float(json.loads(line)["seconds"]) for line in (out / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N, mps")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--samples", type=int, default=512, help="training samples per client")
    ap.add_argument("--models", default="cnn,resnet8")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (num-threads) for both loops")
    args = ap.parse_args()
    configure_threads(args.threads)
    device = pick(args.device)
    per_class = args.clients * args.samples // 10
    print(f"device {describe(device)}, torch {torch.__version__}, {args.threads} thread(s)")
    print(f"workload: 1 round, {args.clients} clients x {args.samples} samples 3x32x32, 1 epoch, batch 32, SGD lr 0.05")
    print(f"{'model':<9}{'plain s':>9}{'engine r1 s':>13}{'engine r2 s':>13}{'r2/plain':>10}{'r1/plain':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_cifar10(root / "data", per_class, 10, seed=0)
        for model in args.models.split(","):
            overrides: dict[str, object] = {
                "dataset": "cifar10", "data-root": str(root / "data"), "augment": "none", "partition": "iid",
                "num-clients": args.clients, "model": model, "local-epochs": 1, "batch-size": 32, "lr": 0.05,
                "optimizer": "sgd", "momentum": 0.0, "num-server-rounds": 2, "device": args.device,
                "num-threads": args.threads, "energy-meter": "none",
            }  # fmt: skip
            loop = PlainLoop(resolve(full_config(overrides))[0], device)
            before = loop.round()
            r1, r2 = engine_rounds(overrides, root / f"run-{model}")
            plain = (before + loop.round()) / 2
            del loop
            print(f"{model:<9}{plain:>9.2f}{r1:>13.2f}{r2:>13.2f}{r2 / plain:>10.2f}{r1 / plain:>10.2f}")


if __name__ == "__main__":
    main()
