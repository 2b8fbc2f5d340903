"""The README's `fedapp keys fedpews` excerpt is the command's output: each run of lines between
"..." markers appears, contiguous and in order, in what `fedapp keys fedpews` prints today."""

from __future__ import annotations

from pathlib import Path

from fedapp.methods.keys import keys_text

README = Path(__file__).resolve().parents[1] / "README.md"


def excerpt() -> list[list[str]]:
    text = README.read_text()
    block = text.split("`fedapp keys fedpews` (an excerpt):\n\n```\n", 1)[1].split("\n```", 1)[0]
    chunks: list[list[str]] = [[]]
    for line in block.splitlines():
        if line.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(line)
    return [c for c in chunks if c]


def test_the_readme_excerpt_is_the_commands_output() -> None:
    out = keys_text("fedpews").splitlines()
    chunks = excerpt()
    assert len(chunks) == 2 and sum(map(len, chunks)) >= 8
    at = 0
    for chunk in chunks:
        starts = [i for i in range(at, len(out) - len(chunk) + 1) if out[i : i + len(chunk)] == chunk]
        assert starts, f"README lines not in `fedapp keys fedpews` output (after line {at}): {chunk}"
        at = starts[0] + len(chunk)
