"""Run folders that cannot mix (in-process engine, the same serve() `flwr run` uses): an
existing results folder is refused unless resume/overwrite, one run per folder (lock), resume
checks the config hash kept in the checkpoint, a failed start touches nothing, a torn last
metrics line is dropped, run-dir is confined, a damaged checkpoint is named in one line."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import flwr
import pytest

from fedapp.cli import main as fedapp_main
from fedapp.core.config import ConfigError
from fedapp.engine.local_grid import LocalGrid
from fedapp.server import checkpoint, rundir
from fedapp.server.loop import serve
from fedapp.server.results import read_config, read_metrics, read_provenance
from fedapp.sim.run_local import full_config, run_local
from tests.flwr_harness import ROOT
from tests.run_rows import outcome_rows as rows

BASE = {"dataset": "digits", "num-clients": 3, "partition": "iid", "lr": 0.2, "local-steps": 2, "num-server-rounds": 2}


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below ``folder``: contents and modification time (ns)."""
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_local({**BASE, "run-dir": str(tmp_path_factory.mktemp("template") / "run")})


@pytest.fixture
def finished(template: Path, tmp_path: Path) -> Path:
    """A run folder holding a finished 2-round run (a copy of one run made once per module)."""
    return Path(shutil.copytree(template, tmp_path / "run"))


def test_a_folder_with_results_is_refused_and_left_as_it_was(finished: Path) -> None:
    before = snapshot(finished)
    with pytest.raises(ConfigError, match=r"'run-dir' = .*already holds results \(metrics.jsonl.*resume=true.*overwrite=true"):
        run_local({**BASE, "lr": 0.1, "run-dir": str(finished)})
    assert snapshot(finished) == before


def test_overwrite_replaces_the_results_and_resume_continues_them(finished: Path, tmp_path: Path) -> None:
    first = checkpoint.load(finished).token  # type: ignore[union-attr]
    (finished / "mine.txt").write_text("not fedapp's")  # overwrite removes only fedapp's own files
    run_local({**BASE, "num-server-rounds": 1, "lr": 0.1, "run-dir": str(finished), "overwrite": True})
    assert [r["round"] for r in rows(finished)] == [1]
    assert read_config(finished)["lr"] == 0.1 and checkpoint.load(finished).token != first  # type: ignore[union-attr]
    assert (finished / "mine.txt").read_text() == "not fedapp's"
    resumed = run_local({**BASE, "num-server-rounds": 3, "lr": 0.1, "run-dir": str(finished), "resume": True})
    assert [r["round"] for r in rows(resumed)] == [1, 2, 3]
    assert len(read_provenance(resumed)["earlier"]) == 1  # the first start is kept in the provenance


def test_both_resume_and_overwrite_is_refused(finished: Path) -> None:
    with pytest.raises(ConfigError, match="'resume' and 'overwrite' are both true"):
        run_local({**BASE, "run-dir": str(finished), "resume": True, "overwrite": True})


def test_default_run_dirs_are_new_per_run_and_record_provenance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    a, b = run_local({**BASE, "num-server-rounds": 1}), run_local({**BASE, "num-server-rounds": 1})
    assert a != b and a.parent == b.parent == tmp_path / "runs" and re.fullmatch(r"\d{8}-\d{6}-fedavg-digits-[0-9a-f]{4}", a.name)
    prov = read_provenance(a)
    assert prov["engine"] == "in-process" and prov["packages"]["flwr"] == flwr.__version__ and "device" in prov
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert prov["git"]["commit"] == head and prov["git"]["source"] == str(ROOT)  # the checkout fedapp runs from
    assert "provenance" not in read_config(a) and read_config(a)["run-dir"] == str(a)


HOLD = """
import sys, time
from pathlib import Path
from fedapp.server.rundir import RunLock
RunLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
time.sleep(600)
"""


def test_a_second_run_in_a_locked_folder_is_refused_and_a_dead_holder_blocks_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        lock = json.loads((folder / rundir.LOCK).read_text())
        assert lock["pid"] == holder.pid and lock["host"]
        with pytest.raises(ConfigError, match=rf"another run is using it \(pid {holder.pid} on "):
            run_local({**BASE, "run-dir": str(folder)})
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: the lock file stays behind
        holder.wait()
    assert (folder / rundir.LOCK).exists()
    out = run_local({**BASE, "run-dir": str(folder)})
    assert [r["round"] for r in rows(out)] == [1, 2] and not (folder / rundir.LOCK).exists()


def test_resume_refuses_another_config_by_the_hash_in_the_checkpoint(finished: Path) -> None:
    """What happened before: a new start in the folder rewrote config.json and kept the
    checkpoint, and resume=true then compared against the new config.json only."""
    ckpt = checkpoint.load(finished)
    assert ckpt is not None and ckpt.config == checkpoint.learned(read_config(finished))
    config = json.loads((finished / "config.json").read_text())
    (finished / "config.json").write_text(json.dumps({**config, "lr": 0.1, "seed": 7}))
    with pytest.raises(ConfigError, match=r"'lr' = 0.1 differs from 0.2 in .*checkpoint.npz \(also seed\)"):
        run_local({**BASE, "lr": 0.1, "seed": 7, "num-server-rounds": 3, "run-dir": str(finished), "resume": True})


@pytest.mark.parametrize("flag", ["overwrite", "resume"])
def test_a_failed_discovery_touches_nothing(finished: Path, flag: str) -> None:
    from fedapp.client_app import app

    before = snapshot(finished)
    raw = full_config({**BASE, "num-server-rounds": 3, "run-dir": str(finished), flag: True})
    with pytest.raises(ConfigError, match=r"'num-clients' = 3, but node .* reports num-partitions = 2"):
        serve(LocalGrid(app, raw, 2), raw)  # a federation of 2 nodes for a 3-client run
    after = snapshot(finished)
    reason = json.loads(after.pop(rundir.FAILURE)[0])["reason"]  # the only new file: why it failed
    assert after == before and "num-partitions = 2" in reason


def test_a_failed_start_in_a_new_folder_leaves_only_its_reason(tmp_path: Path) -> None:
    from fedapp.client_app import app

    raw = full_config({**BASE, "run-dir": str(tmp_path / "new")})
    with pytest.raises(ConfigError):
        serve(LocalGrid(app, raw, 2), raw)
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == [rundir.FAILURE]
    out = run_local({**BASE, "run-dir": str(tmp_path / "new")})  # a failure is not a result: the folder is usable
    assert [r["round"] for r in rows(out)] == [1, 2] and not (out / rundir.FAILURE).exists()


def test_a_torn_last_metrics_line_is_dropped_on_resume_and_by_the_report(finished: Path, caplog: pytest.LogCaptureFixture) -> None:
    with (finished / "metrics.jsonl").open("a") as fh:
        fh.write('{"round": 3, "accuracy": 0.5, "lo')  # killed mid-write
    with caplog.at_level(logging.WARNING, logger="flwr"):
        assert [r["round"] for r in read_metrics(finished)] == [1, 2]
    assert "dropped its torn last line 3" in caplog.text
    assert fedapp_main(["report", str(finished), "--out", str(finished.parent / "report")]) == 0
    resumed = run_local({**BASE, "num-server-rounds": 3, "run-dir": str(finished), "resume": True})
    assert [r["round"] for r in rows(resumed)] == [1, 2, 3]


def test_a_damaged_line_before_the_last_is_an_error_naming_file_and_line(finished: Path) -> None:
    lines = (finished / "metrics.jsonl").read_text().splitlines()
    (finished / "metrics.jsonl").write_text("\n".join(["{bad", *lines]) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 1 is not a JSON row"):
        read_metrics(finished)


@pytest.mark.parametrize(
    ("run_dir", "needle"),
    [
        ("../escaped", "'..' is not allowed"),
        ("/tmp/x/../../etc", "'..' is not allowed"),
        ("/dev/null", "system or device path"),
        ("/proc/self", "system or device path"),
        ("FILE", "exists and is not a folder"),
    ],
)
def test_run_dir_is_confined_with_one_line_naming_the_key(
    tmp_path: Path, run_dir: str, needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, a relative run-dir resolves against the working directory: run from
    ``tmp_path/cwd`` so ``../escaped`` names ``tmp_path/escaped``, and check nothing landed there."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    target = str(tmp_path / "a-file") if run_dir == "FILE" else run_dir
    if run_dir == "FILE":
        Path(target).write_text("x")
    with pytest.raises(ConfigError, match=rf"^run-config key 'run-dir' = .*{needle}") as err:
        run_local({**BASE, "run-dir": target})
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["cwd", *(["a-file"] if run_dir == "FILE" else [])])
    assert not any((tmp_path / "cwd").iterdir())  # nor a default runs/ folder in the working directory


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp folder another user may enter (pytest's own is private to its owner)."""
    path = Path(tempfile.mkdtemp(prefix="fedapp-ro-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_read_only_folder_is_one_line_naming_key_and_path(shared_tmp: Path) -> None:
    """As a user who may not write there: the run's first write, its lock. Root may write anywhere, so
    as root the child runs in a user namespace of its own: root's capabilities stop at that namespace,
    and it still reads what root reads (another uid could not load an interpreter under /root)."""
    ro = shared_tmp / "ro"
    ro.mkdir(mode=0o555)
    ro.chmod(0o555)
    as_user = ["unshare", "--user"] if os.geteuid() == 0 else []
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; from fedapp.server.rundir import RunLock\n"
        "try:\n    RunLock(Path(sys.argv[1])).acquire()\nexcept Exception as err:\n    sys.exit(f'{type(err).__name__}: {err}')"
    )
    proc = subprocess.run([*as_user, sys.executable, "-c", code, f"{ro}/run"], capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip() == f"ConfigError: run-config key 'run-dir' = '{ro}/run': cannot write there (Permission denied)"


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_checkpoint_is_one_line_naming_the_file(finished: Path, damage: str) -> None:
    path = finished / checkpoint.FILE
    path.write_bytes(b"\x00garbage, not an archive" * 10 if damage == "garbage" else path.read_bytes()[:300])
    with pytest.raises(ConfigError) as err:
        run_local({**BASE, "num-server-rounds": 3, "run-dir": str(finished), "resume": True})
    assert str(err.value).startswith(f"checkpoint {path} is damaged or not a fedapp checkpoint")
    assert "pickled" not in str(err.value) and "\n" not in str(err.value)


def test_relative_run_dirs_land_in_the_superlinks_checkout_or_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `flwr run` the base is the checkout whose flwr-env.sh started the SuperLink, never
    the SuperLink's working directory; without one a relative (or default) run-dir is refused."""
    from fedapp.client_app import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(rundir.CHECKOUT_ENV, raising=False)
    raw = full_config({**BASE, "run-dir": "runs/x"})
    with pytest.raises(ConfigError, match=r"^run-config key 'run-dir' = 'runs/x': a relative run folder needs a base folder"):
        serve(LocalGrid(app, raw, 3), raw, base=rundir.checkout_base())
    assert not (tmp_path / "runs").exists()
    monkeypatch.setenv(rundir.CHECKOUT_ENV, str(tmp_path / "checkout"))
    assert rundir.resolve("runs/x", "fedavg", "digits", rundir.checkout_base()) == tmp_path / "checkout" / "runs" / "x"


def test_runs_that_differ_only_in_how_they_started_are_one_report_group(tmp_path: Path) -> None:
    from fedapp.report.compare import group_runs, load_runs

    config = {"method": "fedavg", "lr": 0.1, "resume": False, "overwrite": False, "discovery-timeout": 120.0}
    starts: list[dict[str, object]] = [
        {}, {"seed": 1, "overwrite": True}, {"seed": 2, "resume": True, "discovery-timeout": 600.0}, {"seed": 3, "lr": 0.2},
    ]  # fmt: skip
    for i, extra in enumerate(starts):
        run = tmp_path / f"fedavg-seed{i}"
        run.mkdir()
        (run / "config.json").write_text(json.dumps({**config, "seed": 0, **extra, "provenance": {"started": f"t{i}"}}))
        (run / "metrics.jsonl").write_text('{"round": 1, "accuracy": 0.5}\n')
    groups = group_runs(load_runs(sorted(tmp_path.iterdir())))
    assert [len(g) for g in groups.values()] == [3, 1]  # lr differs: a group of its own
