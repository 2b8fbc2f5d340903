"""The report's provenance section: which run folders each group holds, the run-config
keys on which the groups differ (a key a group's method never reads shows as —), and the
code version where the runs recorded one.

Paths are shown relative to the runs' common folder (named by its last part only), so a
report committed to the docs names no machine's absolute paths.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedapp.methods.proximal import adds_prox

if TYPE_CHECKING:
    from fedapp.server.results import Run

NOT_CONFIG = {"run-dir", "provenance"}


def common_folder(runs: list[Run]) -> Path:
    parents = [str(r.path.resolve().parent) for r in runs]
    return Path(os.path.commonpath(parents)) if parents else Path(".")


def shown(config: dict[str, Any], key: str) -> Any:
    """``config[key]`` as the table shows it: None (drawn as —) where the run does not have the
    key or its method never reads it (``proximal-mu`` without FedProx's proximal term)."""
    if key == "proximal-mu" and not adds_prox(str(config.get("method", "")), str(config.get("base", ""))):
        return None
    return config.get(key)


def differing_keys(groups: dict[str, list[Run]], ignore: frozenset[str]) -> list[str]:
    """Run-config keys whose shown value is not the same in every group (seed and ignored keys left out)."""
    configs = [g[0].config for g in groups.values() if g]
    keys = sorted({k for c in configs for k in c} - NOT_CONFIG - {"seed"} - ignore)
    return [k for k in keys if len({repr(shown(c, k)) for c in configs}) > 1]


def code_versions(runs: list[Run]) -> list[str]:
    """The code versions recorded in config.json's ``provenance`` (fedapp.server.provenance): the git
    commit of the source (marked where tracked files had local changes) and fedapp's version."""
    found: set[str] = set()
    for run in runs:
        prov = run.provenance
        git: Any = prov.get("git")
        if isinstance(git, dict) and git.get("commit"):
            found.add(f"git {str(git['commit'])[:12]}" + (" with local changes" if git.get("dirty") else ""))
        packages: Any = prov.get("packages")
        if isinstance(packages, dict) and packages.get("fedapp"):
            found.add(f"fedapp {packages['fedapp']}")
    return sorted(found)


def provenance(groups: dict[str, list[Run]], ignore: frozenset[str] = frozenset()) -> str:
    runs = [r for g in groups.values() for r in g]
    root = common_folder(runs)
    lines = ["### Provenance", "", f"Run folders (under `{root.name or root}/`):", ""]
    for name, group in groups.items():
        folders = ", ".join(f"`{r.path.resolve().relative_to(root).as_posix()}`" for r in group)
        seeds = ", ".join(str(r.config.get("seed", "?")) for r in group)
        lines.append(f"- {name} (seeds {seeds}): {folders}")
    keys = differing_keys(groups, ignore)
    lines.append("")
    if keys and len(groups) > 1:
        lines += ["Run-config keys that differ between groups (every other key is the same):", ""]
        lines.append("| group | " + " | ".join(keys) + " |")
        lines.append("|---" * (len(keys) + 1) + "|")
        for name, group in groups.items():
            cells = [shown(group[0].config, k) for k in keys]
            lines.append(f"| {name} | " + " | ".join("—" if v is None else str(v).replace("|", "\\|") for v in cells) + " |")
    elif len(groups) > 1:
        lines.append("The groups' run-configs are the same apart from the keys left out of grouping.")
    if ignore:
        lines += ["", "Allowed to differ within a group: " + ", ".join(f"`{k}`" for k in sorted(ignore)) + "."]
    versions = code_versions(runs)
    lines += ["", "Code: " + ("; ".join(versions) if versions else "no version recorded in the runs' config.json") + "."]
    return "\n".join(lines) + "\n"
