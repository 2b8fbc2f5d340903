"""Session-wide test setup: the shared `flwr run` SuperLink (tests/flwr_harness.py) is stopped at
the end; xdist hands out whole files longest first (tests/longest_files_first.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests import flwr_harness
from tests.longest_files_first import FileSeconds, LongestFileFirst


@pytest.fixture(scope="session", autouse=True)
def stop_shared_superlinks() -> Iterator[None]:
    yield
    flwr_harness.stop_all()


class Scheduler:
    """Registered only where xdist is loaded (its hook is unknown to pytest otherwise, e.g. under -p no:xdist)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LongestFileFirst | None:
        return LongestFileFirst(config, log) if config.getoption("dist") == "loadfile" else None


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) times the files
        config.pluginmanager.register(FileSeconds(), "fedapp-file-seconds")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(Scheduler(), "fedapp-longest-file-first")


def pytest_sessionfinish(session: pytest.Session) -> None:
    timer = session.config.pluginmanager.get_plugin("fedapp-file-seconds")
    if isinstance(timer, FileSeconds):
        timer.save(session.config)
