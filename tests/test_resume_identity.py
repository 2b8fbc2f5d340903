"""A resume reads only its own run's files: checkpoint.npz as a regular file inside the run folder,
bound to the metrics rows written before it; anything else is one line naming the file, before any
training, with every file left as it was. metrics.jsonl that is not rows is one line, never a traceback."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import stat
from pathlib import Path

import pytest

from fedapp.cli import main as fedapp_main
from fedapp.core.config import ConfigError
from fedapp.core.safe_read import UnsafeFile
from fedapp.server import checkpoint, rundir
from fedapp.server.results import RunWriter, parse_rows, read_metrics_upto, rows_digest
from fedapp.sim.run_local import run_local
from tests.run_rows import outcome_rows as rows

BASE = {"dataset": "digits", "num-clients": 3, "partition": "iid", "lr": 0.2, "local-steps": 2, "num-server-rounds": 2}


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry below ``folder``: its type, size and, for a regular file of up to 1 MB, its bytes (links not followed)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.name == rundir.FAILURE:  # a refused start records why (fedapp sim reads it)
            continue
        mode = os.lstat(p).st_mode
        size = os.lstat(p).st_size
        out[str(p.relative_to(folder))] = (stat.S_IFMT(mode), size, p.read_bytes() if stat.S_ISREG(mode) and size < 1 << 20 else b"")
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two finished runs of the same config: 2 rounds, and 3 rounds in another folder."""
    root = tmp_path_factory.mktemp("runs")
    return run_local({**BASE, "run-dir": str(root / "a")}), run_local({**BASE, "num-server-rounds": 3, "run-dir": str(root / "b")})


@pytest.fixture
def run_a(runs: tuple[Path, Path], tmp_path: Path) -> Path:
    return Path(shutil.copytree(runs[0], tmp_path / "a", symlinks=True))


def resume_refused(run: Path, needle: str) -> str:
    before = snapshot(run)
    with pytest.raises(ConfigError) as err:
        run_local({**BASE, "num-server-rounds": 5, "resume": True, "run-dir": str(run)})
    text = str(err.value)
    assert text.startswith(f"checkpoint {run / checkpoint.FILE}") and needle in text and "\n" not in text, text
    assert snapshot(run) == before  # nothing written, nothing lost
    return text


def test_a_resume_continues_its_own_run_and_its_checkpoint_holds_the_rows_digest(run_a: Path) -> None:
    ckpt = checkpoint.load(run_a)
    assert ckpt is not None and ckpt.rows == rows_digest(read_metrics_upto(run_a, 2))
    resumed = run_local({**BASE, "num-server-rounds": 3, "resume": True, "run-dir": str(run_a)})
    assert [r["round"] for r in rows(resumed)] == [1, 2, 3]
    again = checkpoint.load(resumed)
    assert again is not None and again.rows == rows_digest(read_metrics_upto(resumed, 3))


def test_another_runs_valid_checkpoint_is_refused_naming_it(run_a: Path, runs: tuple[Path, Path]) -> None:
    shutil.copy(runs[1] / checkpoint.FILE, run_a / checkpoint.FILE)  # round 3 of the other run: rows 1, 2 here
    resume_refused(run_a, "belongs to another run: metrics.jsonl does not hold the rows of rounds 1..3")


def test_another_runs_rows_under_this_runs_checkpoint_are_refused(run_a: Path, runs: tuple[Path, Path]) -> None:
    other = (runs[1] / "metrics.jsonl").read_text().splitlines()
    (run_a / "metrics.jsonl").write_text("\n".join(other[:2]) + "\n")
    resume_refused(run_a, "belongs to another run")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("fifo", "is a FIFO, not a regular file"),
        ("device", "is a character device, not a regular file"),
        ("folder", "is a folder, not a regular file"),
        ("link out", "leads out of"),
        ("link to /dev/zero", "leads out of"),
        ("dangling", "dangling"),
        ("loop", "cannot be resolved"),
        ("sparse 19 GB", "over the"),
    ],
)
def test_a_checkpoint_that_is_not_a_regular_file_in_the_folder_is_refused_at_once(
    run_a: Path, runs: tuple[Path, Path], kind: str, needle: str
) -> None:
    path = run_a / checkpoint.FILE
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("creating a device node needs root")
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "folder":
        path.mkdir()
    elif kind == "link out":
        path.symlink_to(runs[1] / checkpoint.FILE)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling":
        path.symlink_to("gone.npz")
    elif kind == "loop":
        path.symlink_to("loop.npz")
        (run_a / "loop.npz").symlink_to(checkpoint.FILE)
    else:
        with path.open("wb") as fh:
            fh.truncate(19 << 30)
    resume_refused(run_a, needle)


def test_a_link_to_the_checkpoint_inside_the_folder_is_read(run_a: Path) -> None:
    (run_a / "kept").mkdir()
    os.replace(run_a / checkpoint.FILE, run_a / "kept" / checkpoint.FILE)
    (run_a / checkpoint.FILE).symlink_to(Path("kept") / checkpoint.FILE)
    resumed = run_local({**BASE, "num-server-rounds": 3, "resume": True, "run-dir": str(run_a)})
    assert [r["round"] for r in rows(resumed)] == [1, 2, 3]


def random_value(rng: random.Random, depth: int = 0) -> object:
    pick = rng.randrange(8 if depth < 2 else 6)
    if pick == 0:
        return rng.choice([0.0, -0.0, 1e300, -1e-300, 0.1, 1 / 3, float("nan"), float("inf"), rng.random()])
    if pick == 1:
        return rng.randint(-(2**70), 2**70)
    if pick == 2:
        return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x3000)])) for _ in range(rng.randrange(6)))
    if pick == 3:
        return rng.choice([True, False, None])
    if pick in (4, 5):
        return rng.gauss(0, 1)
    if pick == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.randrange(3))}


def test_the_writers_digest_is_the_one_the_file_gives_back_for_hundreds_of_generated_rows(tmp_path: Path) -> None:
    rng = random.Random(37)
    writer = RunWriter(tmp_path / "r", {"method": "fedavg"})
    digests = []
    for rnd in range(1, 301):
        writer.append({"round": rnd, **{f"m{i}": random_value(rng) for i in range(rng.randrange(1, 6))}})
        digests.append(writer.rows_digest())
    for last in (1, 2, 50, 299, 300):
        assert rows_digest(read_metrics_upto(tmp_path / "r", last)) == digests[last - 1]
    resumed = RunWriter(tmp_path / "r", {"method": "fedavg"}, keep_rounds=120)  # a resume keeps rows 1..120
    assert resumed.rows_digest() == digests[119]
    resumed.append({"round": 121, "x": math.pi})
    assert resumed.rows_digest() == rows_digest(read_metrics_upto(tmp_path / "r", 121)) != digests[120]


def test_hundreds_of_generated_first_lines_are_rows_or_one_line_naming_the_file(tmp_path: Path) -> None:
    rng = random.Random(5)
    path = tmp_path / "metrics.jsonl"
    rest = "".join(json.dumps({"round": r, "accuracy": 0.5}) + "\n" for r in (1, 2))
    seen = {"row": 0, "refused": 0}
    firsts = ["5", "[1, 2]", "null", '"x"', "true", "{}", '{"round": "1"}', "\x00\x01", "{bad"]
    firsts += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))).decode("latin-1") for _ in range(300)]
    for first in firsts:
        path.write_bytes(first.replace("\n", " ").replace("\r", " ").encode("utf-8", "replace") + b"\n" + rest.encode())
        try:
            got = read_metrics_upto(tmp_path, 10)
        except UnsafeFile as err:
            assert str(err).startswith(f"{path}: ") and "\n" not in str(err)
            seen["refused"] += 1
            continue
        assert [r["round"] for r in got] == [1, 2] and not first.strip(), first  # only a blank first line is no row
        seen["row"] += 1
    assert seen["refused"] >= 300
    path.write_text("5\n" + rest)
    with pytest.raises(UnsafeFile, match=r"metrics.jsonl: line 1 is JSON but not a row object \(int\)"):
        parse_rows(path)


@pytest.mark.timeout(120)
def test_the_report_on_a_metrics_file_whose_first_line_is_not_json_is_one_line(run_a: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = (run_a / "metrics.jsonl").read_text()
    (run_a / "metrics.jsonl").write_text("this is not json\n" + lines)
    assert fedapp_main(["report", str(run_a), "--out", str(run_a.parent / "report")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"fedapp: error: {run_a / 'metrics.jsonl'}: line 1 is not a JSON row (Expecting value): the file is damaged"
    os.remove(run_a / "metrics.jsonl")
    os.mkfifo(run_a / "metrics.jsonl")
    assert fedapp_main(["report", str(run_a), "--out", str(run_a.parent / "report")]) == 2
    assert "metrics.jsonl: is a FIFO, not a regular file" in capsys.readouterr().err
