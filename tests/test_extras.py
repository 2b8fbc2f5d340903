"""Optional packages (pyproject.toml extras): a feature whose package is absent stops with one line
naming the extra, before any work; everything else runs without it. A package is made absent the
way Python itself reads it: ``sys.modules[name] = None`` (``import`` raises, ``find_spec`` says
None)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fedapp.cli import main
from fedapp.data import medmnist


def absent(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_medmnist_names_without_the_package_are_the_packages_own_2d_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("medmnist")
    assert tuple(medmnist.info()) == medmnist.FLAGS  # the 2D sets of medmnist/info.py, read from the installed package
    absent(monkeypatch, "medmnist", "medmnist.info")
    medmnist.info.cache_clear()  # nothing read from the package before it went missing
    assert medmnist.names()[:5] == ["pathmnist", "pathmnist-64", "pathmnist-128", "pathmnist-224", "chestmnist"]
    assert len(medmnist.names()) == 12 * 4


def test_a_medmnist_run_without_the_package_names_the_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    absent(monkeypatch, "medmnist", "medmnist.info")
    assert main(["run", "dataset=octmnist", "num-clients=2", "num-server-rounds=1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    want = "run-config key 'dataset' = 'octmnist' needs the package 'medmnist', which is not installed: pip install 'fedapp[medmnist]'"
    assert want in err
    assert [line for line in err.splitlines() if "error" in line] == err.splitlines()[-1:], err  # one line, the last


def test_fedapp_sim_without_ray_names_the_extra_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    absent(monkeypatch, "ray")
    monkeypatch.chdir(tmp_path)
    assert main(["sim", "num-clients=2", "num-server-rounds=1"]) == 2
    err = capsys.readouterr().err
    assert "fedapp sim (Flower's simulation engine; `fedapp run` needs no Ray) needs the package 'ray'" in err
    assert "pip install 'fedapp[simulation]'" in err
    assert list(tmp_path.iterdir()) == []  # no run folder, no config file


def test_report_figures_without_matplotlib_name_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedapp.core.extras import MissingExtra
    from fedapp.report.plot import plot

    absent(monkeypatch, "matplotlib", "matplotlib.pyplot")
    with pytest.raises(MissingExtra, match=r"fedapp report's figures needs the package 'matplotlib'.*pip install 'fedapp\[report\]'"):
        plot({}, tmp_path / "fig.png")
    assert list(tmp_path.iterdir()) == []


def test_digits_runs_without_any_optional_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default dataset and the in-process engine need none of the extras."""
    absent(monkeypatch, "medmnist", "medmnist.info", "ray")
    run_dir = tmp_path / "run"
    assert main(["run", f"run-dir={run_dir}", "num-clients=2", "num-server-rounds=1", "--no-progress"]) == 0
    assert (run_dir / "metrics.jsonl").read_text().count("\n") == 1
