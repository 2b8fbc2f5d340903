"""fedapp.server.rundir's rules one function at a time (tests/test_run_folders.py runs them inside whole runs):
where a run folder resolves, what is refused and with which words, what overwrite removes, the lock."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path

import pytest

from fedapp.core.config import ConfigError
from fedapp.server import rundir


def test_auto_names_are_utc_time_method_dataset_and_four_hex(monkeypatch: pytest.MonkeyPatch) -> None:
    gmtime = time.gmtime
    monkeypatch.setattr(time, "gmtime", lambda *_: gmtime(86400 * 365 + 3661))  # 1971-01-01 01:01:01 UTC
    name = rundir.auto_name("Fed avg/x", "Digits_2.0")
    assert re.fullmatch(r"runs/19710101-010101-Fed-avg-x-Digits_2.0-[0-9a-f]{4}", name), name


def test_checkout_base_is_an_absolute_folder_or_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(rundir.CHECKOUT_ENV, raising=False)
    assert rundir.checkout_base() is None
    monkeypatch.setenv(rundir.CHECKOUT_ENV, "relative/checkout")
    assert rundir.checkout_base() is None
    monkeypatch.setenv(rundir.CHECKOUT_ENV, str(tmp_path))
    assert rundir.checkout_base() == tmp_path


def test_resolve_joins_the_base_and_names_the_default_under_runs(tmp_path: Path) -> None:
    assert rundir.resolve("a/b", "fedavg", "digits", tmp_path) == tmp_path / "a" / "b"
    assert rundir.resolve(str(tmp_path / "abs"), "fedavg", "digits", None) == tmp_path / "abs"
    default = rundir.resolve("", "fedpart", "cifar10", tmp_path)
    assert default.parent == tmp_path / "runs" and default.name.startswith(time.strftime("%Y%m%d-", time.gmtime()))
    assert re.search(r"-fedpart-cifar10-[0-9a-f]{4}$", default.name)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "abs")
    assert rundir.resolve(str(link), "m", "d", None) == link  # the path as given, not its target


BASELESS = (
    "needs a base folder, and this SuperLink was not started from a checkout's scripts/flwr-env.sh (or `fedapp sim`): give an absolute path"
)


@pytest.mark.parametrize(
    ("run_dir", "base", "why"),
    [
        ("x/../y", "tmp", "'x/../y': '..' is not allowed in a run folder"),
        ("runs/x", None, f"'runs/x': a relative run folder {BASELESS}"),
        ("", None, f"'': the default (a new folder under runs/) {BASELESS}"),
        ("/dev", None, "'/dev': /dev is a system or device path, not a results folder"),
        ("/sys/kernel", None, "'/sys/kernel': /sys/kernel is a system or device path, not a results folder"),
        ("LINK", None, "'{tmp}/to-proc': /proc/{pid}/fd is a system or device path, not a results folder"),
        ("FILE", None, "'{tmp}/file': {tmp}/file exists and is not a folder"),
    ],
)
def test_resolve_refuses_with_the_key_the_value_and_why(tmp_path: Path, run_dir: str, base: str | None, why: str) -> None:
    if run_dir == "LINK":
        run_dir = str(tmp_path / "to-proc")
        Path(run_dir).symlink_to("/proc/self/fd")  # a folder by its link, under /proc by its target
    if run_dir == "FILE":
        run_dir = str(tmp_path / "file")
        Path(run_dir).write_text("x")
    with pytest.raises(ConfigError) as err:
        rundir.resolve(run_dir, "m", "d", tmp_path if base else None)
    assert str(err.value) == "run-config key 'run-dir' = " + why.format(tmp=tmp_path, pid=os.getpid())
    assert rundir.resolve(str(tmp_path / "devices"), "m", "d", None) == tmp_path / "devices"  # only the roots themselves


def test_only_non_empty_result_files_hold_results_and_reuse_needs_a_flag(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "metrics.jsonl").write_text("")  # a start that finished no round
    assert rundir.holds_results(tmp_path) == []
    rundir.check_reuse(tmp_path, resume=False, overwrite=False, has_checkpoint=False)
    (tmp_path / "model.npz").write_bytes(b"x")
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    assert rundir.holds_results(tmp_path) == ["metrics.jsonl", "model.npz"]
    head = re.escape(f"run-config key 'run-dir' = '{tmp_path}': ")
    with pytest.raises(ConfigError, match=rf"^{head}it already holds results \(metrics.jsonl, model.npz\); set resume=true"):
        rundir.check_reuse(tmp_path, resume=False, overwrite=False, has_checkpoint=True)
    with pytest.raises(ConfigError, match=rf"^{head}resume=true, but it holds metrics.jsonl, model.npz and no checkpoint.npz"):
        rundir.check_reuse(tmp_path, resume=True, overwrite=False, has_checkpoint=False)
    rundir.check_reuse(tmp_path, resume=True, overwrite=False, has_checkpoint=True)
    rundir.check_reuse(tmp_path, resume=False, overwrite=True, has_checkpoint=False)
    for results in (True, False):
        folder = tmp_path if results else tmp_path / "empty"
        with pytest.raises(ConfigError, match=r"^run-config keys 'resume' and 'overwrite' are both true: choose one$"):
            rundir.check_reuse(folder, resume=True, overwrite=True, has_checkpoint=True)


def test_clear_removes_only_fedapps_run_files(tmp_path: Path) -> None:
    for name in (*rundir.RUN_FILES, "notes.txt", "plot.png"):
        (tmp_path / name).write_text("x")
    (tmp_path / rundir.CLIENT_STATE / "token").mkdir(parents=True)
    (tmp_path / rundir.CLIENT_STATE / "token" / "state.npz").write_text("x")
    rundir.clear(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "plot.png"]
    rundir.clear(tmp_path)  # nothing left to remove: no error


def test_the_lock_is_exclusive_names_its_holder_and_removes_a_folder_it_created(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "run"
    before = time.time()
    first = rundir.RunLock(folder).acquire()
    assert first.created and first.fd is not None
    info = json.loads((folder / rundir.LOCK).read_text())
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname() and before <= info["started"] <= time.time()
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["started"]))
    with pytest.raises(
        ConfigError,
        match=re.escape(
            f"run-config key 'run-dir' = '{folder}': another run is using it (pid {os.getpid()} on {socket.gethostname()} since {since})"
        ),
    ):
        rundir.RunLock(folder).acquire()  # another open file: flock refuses it even in this process
    (folder / "kept").write_text("x")
    first.release(remove_if_empty=True)
    assert first.fd is None and sorted(p.name for p in folder.iterdir()) == ["kept"]  # lock file gone, folder not empty: kept
    first.release()  # twice: nothing to do
    second = rundir.RunLock(folder).acquire()  # free again
    assert not second.created
    second.release(remove_if_empty=True)
    assert folder.exists()  # not created by this lock: kept even if it were empty
    (folder / "kept").unlink()
    third = rundir.RunLock(tmp_path / "new").acquire()
    third.release()
    assert (tmp_path / "new").is_dir()  # remove_if_empty not asked
    fourth = rundir.RunLock(tmp_path / "new2").acquire()
    fourth.release(remove_if_empty=True)
    assert not (tmp_path / "new2").exists()


def test_a_lock_that_cannot_be_written_and_an_unreadable_holder_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"^run-config key 'run-dir' = '.*/file/run': cannot write there \(Not a directory\)$"):
        rundir.RunLock(tmp_path / "file" / "run").acquire()
    lock = rundir.RunLock(tmp_path)
    assert lock.holder() == f"lock file {tmp_path / rundir.LOCK}"
    (tmp_path / rundir.LOCK).write_text("not json")
    assert lock.holder() == f"lock file {tmp_path / rundir.LOCK}"
    (tmp_path / rundir.LOCK).write_text("{}")
    assert lock.holder() == f"pid None on None since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(0))}"


def test_a_failure_is_read_back_only_if_recorded_since_the_given_time(tmp_path: Path) -> None:
    assert rundir.read_failure(tmp_path) is None
    before = time.time()
    rundir.record_failure(tmp_path, "no node holds partition 2", "discovery")
    info = json.loads((tmp_path / rundir.FAILURE).read_text())
    assert info["reason"] == "no node holds partition 2" and info["stage"] == "discovery" and info["pid"] == os.getpid()
    assert info["host"] == socket.gethostname() and info["time"] >= before
    assert rundir.read_failure(tmp_path) == "no node holds partition 2"
    assert rundir.read_failure(tmp_path, since=info["time"]) == "no node holds partition 2"  # at: still this run's
    assert rundir.read_failure(tmp_path, since=info["time"] + 1) is None  # an earlier run's failure
    (tmp_path / rundir.FAILURE).write_text('{"reason": "x"}')
    assert rundir.read_failure(tmp_path) == "x" and rundir.read_failure(tmp_path, since=1.0) is None  # no time: 0
    (tmp_path / rundir.FAILURE).write_text("{torn")
    assert rundir.read_failure(tmp_path) is None
    rundir.record_failure(tmp_path / "missing", "x", "start")  # a folder that is gone: nothing written, no error
    assert not (tmp_path / "missing").exists()


def test_the_lock_file_is_0644_and_releasing_is_safe_when_never_held_or_already_gone(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        lock = rundir.RunLock(tmp_path).acquire()
        assert (tmp_path / rundir.LOCK).stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(umask)
    rundir.RunLock(tmp_path).release()  # never acquired: leaves the holder's lock alone
    assert (tmp_path / rundir.LOCK).exists()
    (tmp_path / rundir.LOCK).unlink()  # removed by hand while held
    lock.release()
    assert lock.fd is None


def test_a_lock_file_replaced_between_open_and_lock_is_opened_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A releasing holder removes the file after this start opened it and another start makes a new one:
    the lock must be on the file at the path, or two runs would both hold "the" lock."""
    real_flock, path = rundir.fcntl.flock, tmp_path / rundir.LOCK
    calls = []

    def racing_flock(fd: int, op: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            path.unlink()
            path.write_text("")
        real_flock(fd, op)

    monkeypatch.setattr(rundir.fcntl, "flock", racing_flock)
    lock = rundir.RunLock(tmp_path).acquire()
    monkeypatch.setattr(rundir.fcntl, "flock", real_flock)
    assert len(calls) == 2 and os.fstat(lock.fd or -1).st_ino == path.stat().st_ino
    with pytest.raises(ConfigError, match="another run is using it"):
        rundir.RunLock(tmp_path).acquire()
    lock.release()
