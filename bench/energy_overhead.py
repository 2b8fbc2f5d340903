"""Overhead of background energy sampling on a training loop, measured in one run.

The same local_train call (fedapp.core.train, MLP on digits-sized data, one thread) is timed
alternately with no sampler and with a Sampler thread reading a real meter back end,
for each sampling interval asked. This machine has no meter, so by default the Jetson
sysfs back end reads a generated INA3221 tree (the same file reads as on a board);
``--meter auto`` samples the device's own meter instead.

    PYTHONPATH=. python bench/energy_overhead.py [--intervals 0.1,0.01] [--pairs 15] [--steps 400]

Prints, per interval: median time per training run without / with the sampler, the
median of the paired ratios (with/without; 1.00 = no slowdown), and the sampler
thread's own CPU time as a share of the training time (load-independent).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from fedapp.core.runtime import configure_threads
from fedapp.core.train import TrainSettings, local_train
from fedapp.energy.auto import MeterSettings, open_sensors
from fedapp.energy.base import Sensor
from fedapp.energy.jetson import JetsonRails
from fedapp.energy.sampler import Sampler


def fixture_sysfs(root: Path) -> None:
    """An Orin-style INA3221 hwmon tree (in1 = VDD_IN at 5 V, 2 A)."""
    hw = root / "bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
    hw.mkdir(parents=True)
    for name, value in {"name": "ina3221", "in1_label": "VDD_IN", "in1_input": 5000, "curr1_input": 2000}.items():
        (hw / name).write_text(f"{value}\n")


def train_once(steps: int, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(1797, 64, generator=gen), torch.randint(0, 10, (1797,), generator=gen)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    t0 = time.perf_counter()
    local_train(model, x, y, TrainSettings(epochs=0, steps=steps, batch_size=32, lr=0.05), gen)
    return time.perf_counter() - t0


def sensors(meter: str, root: Path) -> list[Sensor]:
    if meter == "fixture":
        return [JetsonRails(root)]
    found, text = open_sensors(MeterSettings(meter=meter))
    print(text)
    if not found:
        sys.exit("no meter on this device: use --meter fixture")
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--intervals", default="0.1,0.01", help="sampling intervals in seconds, comma-separated")
    ap.add_argument("--pairs", type=int, default=15, help="alternating without/with pairs per interval")
    ap.add_argument("--steps", type=int, default=400, help="minibatch steps per training run")
    ap.add_argument("--meter", default="fixture", help="'fixture' (Jetson sysfs back end on a generated tree) or an energy-meter value")
    args = ap.parse_args()
    configure_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        fixture_sysfs(Path(tmp))
        train_once(args.steps, 0)  # warm-up
        print(f"training run: {args.steps} SGD steps, batch 32, MLP 64-256-256-10, 1 thread; meter: {args.meter}")
        print(
            "| interval s | median s without | median s with | median paired ratio with/without | sampler CPU / training time | samples/s |"
        )
        print("|---|---|---|---|---|---|")
        for interval in [float(v) for v in args.intervals.split(",")]:
            off, on, ratios, cpu, samples = [], [], [], 0.0, 0
            for i in range(args.pairs):
                order = (False, True) if i % 2 == 0 else (True, False)  # alternate which goes first
                pair: dict[bool, float] = {}
                for sampled in order:
                    if sampled:
                        sampler = Sampler(sensors(args.meter, Path(tmp)), interval)
                        n0 = sampler.samples
                        pair[True] = train_once(args.steps, i)
                        sampler.close()
                        cpu, samples = cpu + sampler.cpu_seconds, samples + sampler.samples - n0
                    else:
                        pair[False] = train_once(args.steps, i)
                off.append(pair[False])
                on.append(pair[True])
                ratios.append(pair[True] / pair[False])
            print(
                f"| {interval} | {statistics.median(off):.3f} | {statistics.median(on):.3f} | {statistics.median(ratios):.3f} "
                f"| {100 * cpu / sum(on):.3f} % | {samples / sum(on):.1f} |"
            )


if __name__ == "__main__":
    main()
