"""Session-wide test setup: the shared `flwr run` SuperLink (tests/flwr_harness.py) is stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import flwr_harness


@pytest.fixture(scope="session", autouse=True)
def stop_shared_superlinks() -> Iterator[None]:
    yield
    flwr_harness.stop_all()
