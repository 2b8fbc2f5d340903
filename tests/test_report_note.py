"""`fedapp report`'s note under its table says what the cells are; for personalised accuracy it
also says the number is self-reported by the clients (the server cannot recompute it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedapp.report.compare import PERSONAL_NOTE, TABLE_NOTE, report
from tests.test_report_sections import write_run


def rows() -> list[dict[str, object]]:
    return [
        {"round": r, "accuracy": a, "personalized_accuracy": p, "bytes_up": 10, "bytes_down": 10}
        for r, a, p in ((1, 0.4, 0.5), (2, 0.6, 0.7))
    ]


@pytest.mark.parametrize(
    ("metric", "self_reported"), [("accuracy", False), ("personalized_accuracy", True), ("personalized_accuracy_min", True)]
)
def test_the_note_says_personalised_accuracy_is_self_reported(tmp_path: Path, metric: str, self_reported: bool) -> None:
    run = write_run(tmp_path / "sel-seed0", "fedselect", 0, rows())
    md, _ = report([run], tmp_path / "out", key=metric)
    note = next(line for line in md.splitlines() if line.startswith("Cells are"))
    assert note == TABLE_NOTE + (" " + PERSONAL_NOTE if self_reported else "")
    assert ("self-reported" in (tmp_path / "out" / "report.md").read_text()) is self_reported
