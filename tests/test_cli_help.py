"""Every flag of `fedapp deploy ...` and `fedapp energy probe` says what it does in --help, and
`fedapp run --help` shows an example whose config file exists."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedapp.cli import parser

ROOT = Path(__file__).resolve().parents[1]


def subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def test_every_deploy_and_energy_probe_flag_has_help() -> None:
    top = subparsers(parser())
    commands = {f"deploy {n}": p for n, p in subparsers(top["deploy"]).items()}
    commands["energy probe"] = subparsers(top["energy"])["probe"]
    missing = [
        f"fedapp {name} {a.option_strings[0] if a.option_strings else a.dest}"
        for name, p in commands.items()
        for a in p._actions
        if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()
    ]  # fmt: skip
    assert len(commands) >= 8 and missing == []


def test_run_help_shows_an_example_that_exists() -> None:
    text = subparsers(parser())["run"].format_help()
    example = text.split("example: ", 1)[1].split()
    assert example[:2] == ["fedapp", "run"] and (ROOT / example[2]).is_file()
