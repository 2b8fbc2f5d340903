"""Measured local-training time of FedPart rounds against full-network rounds, in one process.

Every schedule entry (FULL and each layer group) trains the same model from the same start
for the same minibatches, interleaved in a shuffled order per repeat so machine load hits all
entries alike; the median seconds per entry are compared with the analytic ratio
(F(all) + 2*sum_{j>=k} F(j)) / 3F(all) of spec fedpart.md §1.4, and weighted by a schedule.

    PYTHONPATH=. nice -n 10 python bench/fedpart_compute.py --model cnn-bn --repeats 7
    PYTHONPATH=. nice -n 10 python bench/fedpart_compute.py --model resnet8 --steps 4 --repeats 3
"""

from __future__ import annotations

import argparse
import random
import statistics

import torch

from fedapp.core.masks import layer_groups
from fedapp.core.runtime import configure_threads
from fedapp.core.train import TrainSettings, local_train
from fedapp.methods.accounting import group_macs, group_sizes, round_macs
from fedapp.methods.fedpart import train_only
from fedapp.methods.layer_schedule import FULL, schedule
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.sim.run_local import full_config

SHAPES = {"cnn-bn": ((1, 8, 8), 10), "resnet8": ((3, 32, 32), 10), "resnet18": ((3, 32, 32), 10)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(SHAPES), default="cnn-bn")
    ap.add_argument("--samples", type=int, default=130, help="local training samples (digits: 130 per client)")
    ap.add_argument("--steps", type=int, default=0, help="minibatch steps per round (0: --epochs over --samples)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--schedule", default="5,2,3,5", help="W,R/L,C,B for the schedule-weighted ratio")
    args = ap.parse_args()
    configure_threads(1)
    cfg = resolve(full_config({"model": args.model}))[0]
    shape, classes = SHAPES[args.model]
    model = build_model(cfg, shape, classes, seed=0)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    groups = layer_groups(model)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(args.samples, *shape, generator=gen), torch.randint(0, classes, (args.samples,), generator=gen)
    settings = TrainSettings(epochs=args.epochs, steps=args.steps, batch_size=32, lr=1e-3, optimizer="adam")
    entries = [FULL, *range(len(groups))]
    seconds: dict[int, list[float]] = {e: [] for e in entries}
    order = random.Random(0)
    for _ in range(args.repeats):
        for e in order.sample(entries, len(entries)):
            model.load_state_dict(start)
            train_only(model, e)
            seconds[e].append(local_train(model, x, y, settings, torch.Generator().manual_seed(1)).seconds)
    med = {e: statistics.median(v) for e, v in seconds.items()}
    macs, sizes = group_macs(model, shape, groups), group_sizes(model, groups)
    print(f"model {args.model}: {sum(sizes):,} parameters, {sum(macs):,} forward MACs per sample, {args.repeats} repeats, 1 thread\n")
    print("| entry | group | params | median s | measured / full | analytic / full |")
    print("|---|---|---|---|---|---|")
    for e in entries:
        name, n = ("all", sum(sizes)) if e == FULL else (groups[e].name, sizes[e])
        print(f"| {e} | {name} | {n:,} | {med[e]:.4f} | {med[e] / med[FULL]:.3f} | {round_macs(e, macs) / round_macs(FULL, macs):.3f} |")
    w, rl, c, b = (int(v) for v in args.schedule.split(","))
    plan = schedule(len(groups), c, w, b, rl, "sequential")
    measured = sum(med[e] for e in plan) / (len(plan) * med[FULL])
    analytic = sum(round_macs(e, macs) for e in plan) / (len(plan) * round_macs(FULL, macs))
    print(f"\nschedule W={w} R/L={rl} C={c} B={b} (T={len(plan)}): training time FedPart / FNU")
    print(f"measured {measured:.3f}, analytic {analytic:.3f}")


if __name__ == "__main__":
    main()
