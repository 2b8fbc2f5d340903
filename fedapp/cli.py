"""The ``fedapp`` command: run (in-process engine), report, energy (join a wall-plug log, probe meters)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedapp.config import ConfigError, load_toml_config, parse_overrides


def cmd_run(args: argparse.Namespace) -> int:
    from fedapp.engine.run_local import run_local

    overrides = {}
    for item in args.config:
        overrides.update(load_toml_config(item) if Path(item).suffix == ".toml" else parse_overrides(item))
    out = run_local(overrides)
    print(f"results in {out}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from fedapp.report import report

    out = Path(args.out) if args.out else Path(args.runs[0]).parent / "report"
    md, png = report(args.runs, out, args.target, args.metric, args.baseline)
    print(md)
    print(f"plot: {png}\ntable: {out / 'report.md'}")
    return 0


def cmd_energy_join(args: argparse.Namespace) -> int:
    from fedapp.energy.external import join

    out, rows = join(args.run, args.csv, args.client, time_col=args.time_col, watts_col=args.watts_col, offset=args.clock_offset)
    label = "all" if args.client is None else str(args.client)
    total = sum(r["external_round_j"][label] for r in rows)
    low = min((r["external_round_coverage"][label] for r in rows), default=0.0)
    print(f"{len(rows)} rounds, {total:.1f} J from {args.csv} (meter '{label}'), least round coverage {low:.0%}; written to {out}")
    if low < 1.0:
        print("warning: the meter log does not cover every round window (check clocks, or --clock-offset)", file=sys.stderr)
    return 0


def cmd_energy_probe(args: argparse.Namespace) -> int:
    import time

    from fedapp.energy.auto import MeterSettings, open_sensors
    from fedapp.energy.sampler import Sampler

    s = MeterSettings(args.meter, args.interval, args.rails, args.sysfs_root, args.tegrastats)
    sensors, text = open_sensors(s)
    print(text)
    if sensors:
        sampler = Sampler(sensors, s.interval)
        with sampler.window() as w:
            time.sleep(args.seconds)
        sampler.close()
        print(f"{w.joules:.3f} J in {w.seconds:.2f} s = {w.joules / w.seconds:.3f} W mean ({sampler.samples} samples)")  # type: ignore[operator]
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedapp", description="Partial-network federated learning on Flower")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a federation in-process (same server/client code as `flwr run`, no Ray)")
    r.add_argument("config", nargs="*", help='run-config TOML files and/or "key=value ..." overrides, applied in order')
    r.set_defaults(fn=cmd_run)
    rep = sub.add_parser("report", help="plot and tabulate run folders")
    rep.add_argument("runs", nargs="+", help="run folders (each with metrics.jsonl and config.json)")
    rep.add_argument("--out", help="output folder (default: <first run's parent>/report)")
    rep.add_argument("--target", type=float, default=None, help="accuracy target for rounds-to-target (default: the run's target-accuracy)")
    rep.add_argument("--metric", default="accuracy", help="metrics.jsonl key to plot (e.g. personalized_accuracy)")
    rep.add_argument("--baseline", help="run group to compare the others against: energy/time saved, accuracy lost")
    rep.set_defaults(fn=cmd_report)
    en = sub.add_parser("energy", help="energy meters: join a wall-plug log to a run, probe this device's meter")
    esub = en.add_subparsers(dest="energy_cmd", required=True)
    j = esub.add_parser("join", help="integrate a CSV of timestamped watts over each round -> <run>/metrics-energy.jsonl")
    j.add_argument("run", help="run folder")
    j.add_argument("csv", help="meter log: a header, a time column (Unix seconds or ISO 8601) and a watts column")
    j.add_argument("--client", type=int, default=None, help="partition id of the client this plug powers (default: the whole rig)")
    j.add_argument("--time-col", default=None, help="time column name (default: the first named like time/date, else the first)")
    j.add_argument("--watts-col", default=None, help="watts column name (default: the first named like watt/power)")
    j.add_argument("--clock-offset", type=float, default=0.0, help="seconds to add to the meter's clock to match the run's")
    j.set_defaults(fn=cmd_energy_join)
    pr = esub.add_parser("probe", help="open a meter as a client would, say what was picked, and measure a few seconds")
    pr.add_argument("--meter", default="auto")
    pr.add_argument("--interval", type=float, default=0.1)
    pr.add_argument("--rails", default="")
    pr.add_argument("--sysfs-root", default="/sys")
    pr.add_argument("--tegrastats", default="tegrastats")
    pr.add_argument("--seconds", type=float, default=2.0)
    pr.set_defaults(fn=cmd_energy_probe)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except (ConfigError, FileNotFoundError) as err:
        print(f"fedapp: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
