"""`fedapp data ...`: fetch and check dataset files under a data-root; plot a run's split."""

from __future__ import annotations

import argparse
from pathlib import Path


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


def cmd_data_plot(args: argparse.Namespace) -> int:
    import json

    from fedapp.core.config import ConfigError, RunConfig, load_toml_config, parse, parse_overrides
    from fedapp.data.plot import plot_split

    source = Path(args.source)
    if source.is_dir():
        if not (source / "config.json").is_file():
            raise ConfigError(f"{source} has no config.json: is it a fedapp run folder?")
        raw = json.loads((source / "config.json").read_text())
    else:
        raw = load_toml_config(source)
    for item in args.overrides:
        raw.update(parse_overrides(item))
    cfg = parse(RunConfig, raw)  # the split depends on the base keys only
    out = Path(args.out) if args.out else (source / "partition.png" if source.is_dir() else Path(f"{source.stem}-partition.png"))
    print(f"plot: {plot_split(cfg, out, args.kind)}")
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
    pl = dsub.add_parser("plot", help="draw a run's split: training samples of each class per client (Flower Datasets' plot)")
    pl.add_argument("source", help="a run folder (its config.json) or a run-config TOML file")
    pl.add_argument("overrides", nargs="*", help='"key=value ..." run-config overrides, e.g. "num-clients=20 dirichlet-alpha=0.1"')
    pl.add_argument("--out", help="PNG to write (default: <run folder>/partition.png, or <config name>-partition.png)")
    pl.add_argument("--kind", choices=("auto", "bar", "heatmap"), default="auto", help="auto: a heatmap from 30 clients on, else bars")
    pl.set_defaults(fn=cmd_data_plot)
