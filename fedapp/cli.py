"""The ``fedapp`` command: run (in-process engine), report, data fetch/check/list."""

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
    from rich.console import Console
    from rich.markdown import Markdown

    md, png = report(args.runs, out, args.target, args.metric)
    if sys.stdout.isatty():
        Console().print(Markdown(md))
    else:
        print(md)
    print(f"plot: {png}\ntable: {out / 'report.md'}")
    return 0


def cmd_data_fetch(args: argparse.Namespace) -> int:
    from fedapp.data.fetch import fetch

    for name in args.names:
        for report in fetch(name, args.root):
            print(report.text())
    return 0


def cmd_data_check(args: argparse.Namespace) -> int:
    from fedapp.data.fetch import check

    status, reports = check(args.root, args.names, strict=args.strict, md5=not args.no_md5)
    for report in reports:
        print(report.text())
    if not reports:
        print(f"no dataset files under {Path(args.root).expanduser().resolve()} (see `fedapp data list`)")
    return status


def cmd_data_list(args: argparse.Namespace) -> int:
    from fedapp.data import catalog

    for name in catalog.dataset_names():
        files = ", ".join(f for s in catalog.sources_for(name) for f in s.files[:1])
        print(f"{name:22s} {files}")
    return 0


def add_data(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    data = sub.add_parser("data", help="fetch and check dataset files under a data-root")
    dsub = data.add_subparsers(dest="data_cmd", required=True)
    f = dsub.add_parser("fetch", help="download datasets (medmnist / torchvision download code; needs internet)")
    f.add_argument("names", nargs="+", help="dataset names as run-config 'dataset' takes them (mixed sets fetch every source)")
    f.add_argument("--root", required=True, help="the data-root folder")
    f.set_defaults(fn=cmd_data_fetch)
    c = dsub.add_parser("check", help="verify dataset files: present, readable by the loaders, official MD5")
    c.add_argument("names", nargs="*", help="datasets to check (default: every dataset with a file under --root)")
    c.add_argument("--root", required=True, help="the data-root folder")
    c.add_argument("--strict", action="store_true", help="also fail when a file's MD5 differs from the official release")
    c.add_argument("--no-md5", action="store_true", help="skip MD5 (faster on the 224-pixel MedMNIST files)")
    c.set_defaults(fn=cmd_data_check)
    ls = dsub.add_parser("list", help="dataset names and the first file each expects")
    ls.set_defaults(fn=cmd_data_list)


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
    rep.set_defaults(fn=cmd_report)
    add_data(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from fedapp.data.fetch import FetchError

    args = parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except (ConfigError, FileNotFoundError, FetchError) as err:
        print(f"fedapp: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
