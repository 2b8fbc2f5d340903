"""The ``fedapp`` command: run (in-process engine), sim, report, keys, data, energy, deploy (real SuperLink/SuperNodes), fleet."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedapp.core.config import ConfigError, overrides_of
from fedapp.data.cli import add_data
from fedapp.deploy import DeployError
from fedapp.deploy.cli import add_parser as add_deploy
from fedapp.energy.cli import add_energy
from fedapp.fleet import FleetError
from fedapp.fleet.cli import add_fleet


def cmd_run(args: argparse.Namespace) -> int:
    from fedapp.server.progress import interactive
    from fedapp.server.run_log import plain_console
    from fedapp.sim.run_local import run_local

    if not interactive():
        plain_console()  # Flower's colour codes are noise in a pipe or a log file
    out = run_local(overrides_of(args.config), progress=interactive() and not args.no_progress)
    print(f"results in {out}")
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from fedapp.sim.flwr_run import run

    return run(overrides_of(args.config), Path(args.app), args.federation_config)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from fedapp.sim.reproduce import reproduce

    same, lines = reproduce(Path(args.run_dir), args.rounds, Path(args.out) if args.out else None)
    print("\n".join(lines))
    return 0 if same else 1


def cmd_report(args: argparse.Namespace) -> int:
    from fedapp.report.compare import report

    out = Path(args.out) if args.out else Path(args.runs[0]).parent / "report"
    from rich.console import Console
    from rich.markdown import Markdown

    md, png = report(
        args.runs, out, args.target, args.metric, args.baseline, frozenset(args.group_ignore), args.bytes, args.tiers,
        per_seed=args.per_seed, warmup=args.warmup, fleet=args.fleet,
    )  # fmt: skip
    if sys.stdout.isatty():
        Console().print(Markdown(md))
    else:
        print(md)
    print(f"plot: {png} (and .pdf, .svg)\ntable: {out / 'report.md'}\nnumbers: {out / 'summary.csv'}, {out / 'summary.json'}")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from fedapp.methods.keys import keys_text, toml_block
    from fedapp.methods.registry import get_method

    if args.toml:
        if args.method is not None:
            raise SystemExit("fedapp keys --toml writes every method's defaults: name no method")
        print(toml_block())
        return 0
    if args.method is not None:
        get_method(args.method)  # an unknown name: the registry's error, naming the allowed ones
    print(keys_text(args.method))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedapp", description="Partial-network federated learning on Flower")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser(
        "run", help="run a federation in-process (same server/client code as `flwr run`, no Ray)",
        epilog='example: fedapp run configs/demo-digits-fedavg.toml "num-server-rounds=5 seed=1"  (the file, then the overrides)',
    )  # fmt: skip
    r.add_argument("config", nargs="*", help='run-config TOML files and/or "key=value ..." overrides, applied in order')
    r.add_argument("--no-progress", action="store_true", help="one log line per round, not the progress bar (shown in a terminal)")
    r.set_defaults(fn=cmd_run)
    sim = sub.add_parser("sim", help="`flwr run` (Ray simulation) on this checkout's own SuperLink; exits 1 with the reason if it failed")
    sim.add_argument("config", nargs="*", help='run-config TOML files and/or "key=value ..." overrides, applied in order')
    sim.add_argument("--app", default=".", help="the Flower app (this checkout) to run (default: .)")
    sim.add_argument(
        "--federation-config", help='passed to `flwr run`, e.g. "num-supernodes=4 client-resources-num-cpus=1" (default: num-clients nodes)'
    )
    sim.set_defaults(fn=cmd_sim)
    rp = sub.add_parser(
        "reproduce", help="run a finished run again from its config.json in a new folder; compare rows and model.npz (exit 1: differs)"
    )
    rp.add_argument("run_dir", metavar="RUN_DIR", help="a finished run folder (config.json, metrics.jsonl, model.npz)")
    rp.add_argument("--rounds", type=int, help="replay only the first N rounds (compares their rows; default: all)")
    rp.add_argument("--out", help="the new run folder (default: RUN_DIR-reproduced-<UTC time> beside it)")
    rp.set_defaults(fn=cmd_reproduce)
    rep = sub.add_parser("report", help="plot and tabulate run folders")
    rep.add_argument("runs", nargs="+", help="run folders (each with metrics.jsonl and config.json)")
    rep.add_argument("--out", help="output folder (default: <first run's parent>/report)")
    rep.add_argument("--target", type=float, default=None, help="accuracy target for rounds-to-target (default: the run's target-accuracy)")
    rep.add_argument("--metric", default="accuracy", help="metrics.jsonl key to plot (e.g. personalized_accuracy)")
    rep.add_argument("--baseline", help="run group to compare the others against: energy/time saved, accuracy lost")
    rep.add_argument(
        "--group-ignore", action="append", default=[], metavar="KEY", help="config key that may differ within a group of seeds"
    )
    rep.add_argument("--bytes", choices=("both", "up", "down"), default="both", help="bytes on the accuracy-vs-communication axis")
    rep.add_argument("--tiers", action="store_true", help="add rounds, client-rounds saved and train seconds by active fraction")
    rep.add_argument("--per-seed", action="store_true", help="add final accuracy (and round to target) per seed, groups side by side")
    rep.add_argument("--warmup", action="store_true", help="add bytes_up in warmup vs full rounds and the warmup mask statistics (FedPeWS)")
    rep.add_argument("--fleet", action="store_true", help="runs of `fedapp fleet run`: wall seconds and modelled joules to target, plot")
    rep.set_defaults(fn=cmd_report)
    keys = sub.add_parser("keys", help="every run-config key with its default, allowed values and doc (common keys, then the method's)")
    keys.add_argument("method", nargs="?", help="only this method's own keys after the common ones (default: every method's)")
    keys.add_argument("--toml", action="store_true", help="pyproject's [tool.flwr.app.config] block (every key's default)")
    keys.set_defaults(fn=cmd_keys)
    add_data(sub)
    add_energy(sub)
    add_deploy(sub)
    add_fleet(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from fedapp.core.safe_read import UnsafeFile
    from fedapp.data.fetch import FetchError

    args = parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except (ConfigError, DeployError, FileNotFoundError, FetchError, FleetError, UnsafeFile) as err:
        print(f"fedapp: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
