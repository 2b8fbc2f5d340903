"""What a run prints: the meters in one line (ranges of client ids, details left to
meters.json), the per-round line with the time left at the median pace, and Ray's
accelerator FutureWarning filtered once client_app is imported."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedapp.core.logs import clients_line, meters_line, ranges, short_meter
from fedapp.server.progress import RoundLog, duration, time_left

ROOT = Path(__file__).resolve().parents[1]
NONE = "energy-meter=auto: no meter on this device, recording time only (looked for jetson: ...; nvml: ...; rapl: ...)"


def test_client_ids_are_written_as_ranges() -> None:
    assert ranges([7, 0, 2, 1, 5, 8]) == "0-2,5,7-8"
    assert ranges([3]) == "3"


def test_meters_of_every_client_make_one_short_line() -> None:
    assert short_meter(NONE) == "energy-meter=auto: no meter on this device, recording time only"
    assert meters_line({str(p): NONE for p in range(10)}) == (
        "energy meter on all 10 clients: energy-meter=auto: no meter on this device, recording time only (details: meters.json)"
    )
    mixed = {"0": "energy-meter=rapl: RAPL package-0 (x)", "1": NONE, "2": "energy-meter=rapl: RAPL package-0 (y)"}
    assert meters_line(mixed) == (
        "energy meters: clients 0,2: energy-meter=rapl: RAPL package-0; "
        "clients 1: energy-meter=auto: no meter on this device, recording time only (details: meters.json)"
    )


def test_devices_of_every_client_make_one_short_line() -> None:
    assert clients_line("device", {str(p): "cpu" for p in range(100)}, "devices.json") == (
        "device on all 100 clients: cpu (details: devices.json)"
    )
    gpu = "cuda:0 (NVIDIA H100 80GB HBM3)"
    mixed = {"0": gpu, "1": gpu, "2": "cpu", "3": gpu}
    assert clients_line("device", mixed, "devices.json") == f"devices: clients 0-1,3: {gpu}; clients 2: cpu (details: devices.json)"


def test_round_line_counts_time_left_from_the_median_round(caplog: pytest.LogCaptureFixture) -> None:
    assert duration(42.4) == "42s" and duration(185) == "3m05s" and duration(3720) == "1h02m"
    assert time_left([30.0, 1.0, 2.0], 10) == 20.0  # a slow first round does not skew it
    log = RoundLog(last_round=12)
    row = {"accuracy": 0.5, "loss": 1.25, "clients": 4, "failures": 0}
    with caplog.at_level(logging.INFO, logger="flwr"):
        for rnd, seconds in ((1, 30.0), (2, 1.0), (3, 2.0)):
            log(rnd, {**row, "seconds": seconds})
    assert caplog.messages[-1] == "round 3/12: accuracy 0.5000 loss 1.2500 clients 4 failures 0 (2s, 18s left)"


def test_rays_accelerator_warning_is_filtered_after_importing_the_client_app() -> None:
    code = """
import warnings
import client_app
with warnings.catch_warnings(record=True) as seen:  # records what the filters installed so far let through
    warnings.warn("Tip: In future versions of Ray, Ray will no longer override accelerator visible devices", FutureWarning)
    warnings.warn("another FutureWarning", FutureWarning)
print([str(w.message) for w in seen])
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['another FutureWarning']"


def test_the_bar_names_each_time_after_it() -> None:
    """Elapsed then remaining, each followed by its word: "0:00:01 left 0:00:00" read as one second left."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    from fedapp.server.progress import _columns

    out = io.StringIO()
    with Progress(*_columns(), console=Console(file=out, width=120, force_terminal=False), auto_refresh=False) as bar:
        task = bar.add_task("fedavg", total=4)
        bar.update(task, completed=4)
        bar.refresh()
    line = out.getvalue().strip().splitlines()[-1]
    assert re.search(r"4/4 (\d+:\d\d:\d\d|-:--:--) elapsed, (\d+:\d\d:\d\d|-:--:--) left$", line), line
