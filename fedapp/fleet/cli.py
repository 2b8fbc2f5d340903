"""`fedapp fleet run PROFILE RUN-CONFIG...` and `fedapp fleet clean [PID...]` (docs/fleet.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedapp.fleet import FleetError


def cmd_run(args: argparse.Namespace) -> int:
    from fedapp.core.config import overrides_of
    from fedapp.fleet.profile import load_profile
    from fedapp.fleet.runner import run_fleet

    profile = load_profile(args.profile)  # a bad profile is named before anything is created
    base = overrides_of(args.config)
    runs = [base, *({**base, **overrides_of([extra])} for extra in args.also)]
    return run_fleet(profile, runs, Path(args.app), args.probe_kb, args.images, args.runtime)


def cmd_clean(args: argparse.Namespace) -> int:
    from fedapp.fleet.clean import clean, orphaned, prefix_of
    from fedapp.fleet.runner import unavailable

    if (problem := unavailable()) is not None:
        raise FleetError(problem)
    prefixes = [prefix_of(p) for p in args.pids] if args.pids else orphaned()
    for prefix in prefixes:
        found = clean(prefix)
        print(f"{prefix}*: removed " + "; ".join(f"{k} {', '.join(v) or '-'}" for k, v in found.items()))
    if not prefixes:
        print("no fleet left behind")
    return 0


def add_fleet(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    f = sub.add_parser("fleet", help="an emulated edge fleet on this machine: namespaces, shaped links, CPU/memory limits (root, Linux)")
    fsub = f.add_subparsers(dest="fleet_cmd", required=True)
    r = fsub.add_parser("run", help="bring the fleet up, run one federation on it, record per-node bytes/CPU/modelled joules, tear down")
    r.add_argument("profile", help="fleet profile TOML (device classes: configs/fleet/)")
    r.add_argument("config", nargs="+", help='run-config TOML files and/or "key=value ..." overrides, applied in order')
    r.add_argument("--app", default=".", help="the Flower app (a git checkout of fedapp) to run (default: .)")
    r.add_argument("--probe-kb", type=int, default=0, help="before the run, send this many KiB over each link each way and record the rate")
    r.add_argument(
        "--images", metavar="TAG", default=None,
        help="run the SuperLink and SuperNodes from the images scripts/images.sh built with this tag (buildah), not from this installation",
    )  # fmt: skip
    r.add_argument(
        "--runtime", choices=("warm", "flower"), default="warm",
        help="each node's ClientApp runtime: warm (default, fedapp's forked one) or flower (a fresh process per message)",
    )  # fmt: skip
    r.add_argument(
        "--also", action="append", default=[], metavar="OVERRIDES",
        help='another run on the same fleet after the first: a TOML file or "key=value ..." applied on top of the run-config',
    )  # fmt: skip
    r.set_defaults(fn=cmd_run)
    c = fsub.add_parser("clean", help="remove what a killed `fedapp fleet run` left: its processes, namespaces, cgroups, work folder")
    c.add_argument("pids", nargs="*", type=int, help="the runner's process id (default: every fleet whose runner is gone)")
    c.set_defaults(fn=cmd_clean)
