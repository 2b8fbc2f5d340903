"""`fedapp data ...`: fetch and check dataset files under a data-root."""

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
