"""`fedapp energy ...`: join a wall-plug log to a run, probe this device's meter."""

from __future__ import annotations

import argparse
import sys


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


def add_energy(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
    pr.add_argument("--meter", default="auto", help="as run-config energy-meter: auto, none, jetson, rapl, nvml, or '+'-joined")
    pr.add_argument("--interval", type=float, default=0.1, help="seconds between readings (default 0.1)")
    pr.add_argument("--rails", default="", help="Jetson rails / RAPL domains / NVML GPU indices to sum, comma-separated")
    pr.add_argument("--sysfs-root", default="/sys", help="sysfs root the jetson and rapl meters read (a host /sys in a container)")
    pr.add_argument("--tegrastats", default="tegrastats", help="tegrastats command (--interval is appended) or a --logfile to follow")
    pr.add_argument("--seconds", type=float, default=2.0, help="how long to measure (default 2)")
    pr.set_defaults(fn=cmd_energy_probe)
