"""`fedapp report --bytes up`: the accuracy-vs-communication axis can count upload only."""

from __future__ import annotations

import json
from pathlib import Path

from fedapp.cli import main
from fedapp.server.results import Run


def test_cumulative_bytes_by_direction() -> None:
    run = Run(Path("x"), {}, [{"bytes_up": 10, "bytes_down": 100}, {"bytes_up": 5, "bytes_down": 100}, {"bytes_down": 1}])
    assert run.cumulative_bytes("up") == [10, 15, 15]
    assert run.cumulative_bytes("down") == [100, 200, 201]
    assert run.cumulative_bytes() == [110, 215, 216]


def test_report_cli_accepts_upload_axis(tmp_path: Path) -> None:
    run = tmp_path / "a-seed0"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "fedpart", "seed": 0}))
    rows = [{"round": r, "accuracy": 0.5 + 0.1 * r, "bytes_up": 4 * r, "bytes_down": 8} for r in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--bytes", "up"]) == 0
    assert (tmp_path / "rep" / "accuracy.png").stat().st_size > 0
    assert "| a | fedpart | 1 | 70.00 | 70.00 |" in (tmp_path / "rep" / "report.md").read_text()
