"""xdist scheduling for this suite: whole files (``--dist loadfile``), the longest file first.

A handful of files start real Flower processes and take one to three minutes each; xdist's own
order (files with the most tests first, and a worker taking a second file while it still has two
tests to go) left them to the end, often on one worker. Here each file's seconds in the last run
are kept in pytest's cache, and a free worker takes the longest file still waiting, and takes the
next only when its file is down to its last test (the one an xdist worker holds back until it
knows what follows). Without a cache (a fresh clone), files with more tests go first, as before.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

CACHE_KEY = "fedapp/file-seconds"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class LongestFileFirst(LoadFileScheduling):
    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        cache = getattr(config, "cache", None)  # absent under -p no:cacheprovider
        self.seconds: dict[str, float] = cache.get(CACHE_KEY, {}) if cache is not None else {}

    def _assign_work_unit(self, node: Any) -> None:
        if self.seconds:
            longest = max(self.workqueue, key=lambda scope: self.seconds.get(file_of(scope), 0.0))
            self.workqueue.move_to_end(longest, last=False)
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)


class FileSeconds:
    """Adds up each file's test seconds (setup, call, teardown) as reports reach the controller."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def save(self, config: pytest.Config) -> None:
        cache = getattr(config, "cache", None)
        if cache is not None and self.seconds:
            known = dict(cache.get(CACHE_KEY, {}))
            known.update({k: round(v, 2) for k, v in self.seconds.items()})
            cache.set(CACHE_KEY, known)
