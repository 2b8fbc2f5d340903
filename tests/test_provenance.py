"""What a run folder records of what made it (config.json ``provenance``), in-process: the commit
(equal to `git rev-parse HEAD`), the dirty flag and the diff's digest (flipping when a file is
edited), the installed versions, the thread settings, each node's versions and the digest of its
data as loaded (computed here from the arrays themselves), and a node whose torch differs from the
server's named in the first row. The same fields (tests/provenance_checks.py) are checked with
engine workers in tests/test_engine_workers.py, under `flwr run` in tests/test_sim.py and in a
deployment in tests/test_roster_deploy.py."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from pathlib import Path

import pytest

from fedapp.core.config import RunConfig, defaults_of
from fedapp.server import provenance
from fedapp.server.results import read_config, read_provenance
from fedapp.sim.run_local import run_local
from tests.flwr_harness import ROOT
from tests.provenance_checks import check_recorded, expected_git
from tests.run_rows import outcome_rows

RUN = {"dataset": "digits", "num-clients": 3, "partition": "iid", "lr": 0.2, "local-steps": 2, "num-server-rounds": 2}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_local({**RUN, "run-dir": str(tmp_path_factory.mktemp("prov") / "run")})


def test_an_in_process_run_records_commit_versions_threads_and_each_nodes_data(run: Path) -> None:
    prov = read_provenance(run)
    check_recorded(prov, read_config(run), ROOT)
    assert prov["git"]["source"] == str(ROOT) and prov["engine"] == "in-process"
    config = read_config(run)  # the resolved run-config: every key, the given values
    assert set(defaults_of(RunConfig)) <= set(config) and {k: config[k] for k in RUN} == RUN and config["run-dir"] == str(run)
    assert all("node_versions_differ" not in r for r in outcome_rows(run))  # one machine: no node differs


def make_repo(root: Path) -> Path:
    """A git repository holding a copy of the fedapp package, committed."""
    shutil.copytree(ROOT / "fedapp", root / "fedapp", ignore=shutil.ignore_patterns("__pycache__"))
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], [*env, "commit", "-qm", "copy"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return root


def test_the_dirty_flag_and_diff_digest_flip_when_a_file_is_edited(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    clean, how = provenance.source(repo / "fedapp")
    assert how == "the checkout fedapp was imported from" and clean is not None
    assert clean["dirty"] is False and clean["diff-sha256"] is None and clean["commit"] == expected_git(repo)["commit"]
    (repo / "notes.txt").write_text("an untracked file, not ignored: the tree is no longer the commit")
    untracked = provenance.git_state(repo)
    assert untracked is not None and untracked["dirty"] is True and untracked["diff-sha256"] == expected_git(repo)["diff-sha256"]
    (repo / "fedapp" / "cli.py").write_text((repo / "fedapp" / "cli.py").read_text() + "# edited\n")
    edited = provenance.git_state(repo)
    assert edited is not None and edited["dirty"] is True and edited["diff-sha256"] == expected_git(repo)["diff-sha256"]
    assert edited["diff-sha256"] != untracked["diff-sha256"] and edited["commit"] == clean["commit"]


def test_code_from_an_app_bundle_takes_the_commit_of_the_checkout_holding_the_same_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `flwr run` fedapp runs from the installed FAB (no .git): FEDAPP_CHECKOUT's commit is
    recorded only while that checkout's fedapp/ files are the running code."""
    repo, fab = make_repo(tmp_path / "repo"), tmp_path / "fab"
    shutil.copytree(repo / "fedapp", fab / "fedapp")
    monkeypatch.delenv("FEDAPP_CHECKOUT", raising=False)
    assert provenance.source(fab / "fedapp") == (None, f"fedapp ran from {fab}, not a git checkout, and FEDAPP_CHECKOUT is not set")
    monkeypatch.setenv("FEDAPP_CHECKOUT", str(tmp_path))  # a folder that is no checkout of the app (not visible, say)
    nowhere = f"fedapp ran from {fab} (no .git), and {tmp_path} (FEDAPP_CHECKOUT) holds no fedapp/ folder here"
    assert provenance.source(fab / "fedapp") == (None, nowhere)
    monkeypatch.setenv("FEDAPP_CHECKOUT", str(repo))
    found, how = provenance.source(fab / "fedapp")
    assert found is not None and found["commit"] == expected_git(repo)["commit"] and found["source"] == str(repo)
    assert how.startswith("FEDAPP_CHECKOUT, whose fedapp/ files equal the code that ran")
    (repo / "fedapp" / "cli.py").write_text("# the checkout moved on after the bundle was built\n")
    found, how = provenance.source(fab / "fedapp")
    assert found is None and how == f"fedapp ran from {fab} (no .git), and its code differs from the checkout {repo} (FEDAPP_CHECKOUT)"


def test_a_node_whose_torch_differs_is_named_in_the_first_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedapp.client import node_query

    real = node_query.version_facts
    monkeypatch.setattr(node_query, "version_facts", lambda: {**real(), "version-torch": "1.0.0"})
    out = run_local({**RUN, "num-clients": 2, "run-dir": str(tmp_path / "run")})
    rows, torch = outcome_rows(out), importlib.metadata.version("torch")
    assert rows[0]["node_versions_differ"] == [f"partition {p} (node {1000 + p}): torch 1.0.0 (server {torch})" for p in (0, 1)]
    assert "node_versions_differ" not in rows[1]
    assert read_provenance(out)["nodes"]["1"]["versions"]["torch"] == "1.0.0"
