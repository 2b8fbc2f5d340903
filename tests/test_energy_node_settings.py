"""Meter commands and sensor paths come from the node, never from the run-config: a run's
submitter cannot make a node execute anything, while the node's own tegrastats setting works."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedapp.core.config import ConfigError
from fedapp.energy.auto import MeterSettings, close_samplers
from fedapp.methods.registry import resolve
from fedapp.sim.run_local import full_config, run_local

BASE = {"num-clients": 2, "num-server-rounds": 1, "partition": "iid", "energy-interval": 0.02}


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("FEDAPP_ENERGY_TEGRASTATS", raising=False)
    monkeypatch.delenv("FEDAPP_ENERGY_SYSFS_ROOT", raising=False)
    yield
    close_samplers()


def test_a_run_config_never_makes_a_node_run_a_command(tmp_path: Path) -> None:
    """The default energy-meter=auto falls back to tegrastats where no sysfs rails exist (here):
    the run-config keys that once named its command and the sysfs root are refused before anything runs."""
    marker = tmp_path / "pwned"
    attack = {"energy-tegrastats": f'sh -c "id > {marker}; sleep 1"', "energy-sysfs-root": str(tmp_path)}
    for key, value in attack.items():
        with pytest.raises(ConfigError, match=f"unknown run-config key.*{key}"):
            run_local({**BASE, key: value, "run-dir": str(tmp_path / f"run-{key}")})
    assert not marker.exists()
    cfg = resolve(full_config(BASE))[0]
    assert (MeterSettings.of(cfg, {}).tegrastats, MeterSettings.of(cfg, {}).sysfs_root) == ("tegrastats", "/sys")


def test_the_nodes_own_tegrastats_command_meters_the_run(tmp_path: Path) -> None:
    ran = tmp_path / "tegrastats-ran"
    printer = tmp_path / "fake_tegrastats.py"  # a constant 5 W board input, every --interval ms, as tegrastats prints it
    printer.write_text(
        "import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\nms = int(sys.argv[sys.argv.index('--interval') + 1])\n"
        "while True:\n    print('RAM 1/2MB VDD_IN 5000mW/5000mW VDD_SOC 1389mW/1389mW', flush=True)\n    time.sleep(ms / 1000)\n"
    )
    node = {"energy-sysfs-root": str(tmp_path / "no-rails"), "energy-tegrastats": shlex.join([sys.executable, str(printer), str(ran)])}
    run = run_local({**BASE, "energy-meter": "jetson", "run-dir": str(tmp_path / "run")}, [node, node])
    assert ran.exists()
    assert all("jetson rails VDD_IN (tegrastats" in m for m in json.loads((run / "meters.json").read_text()).values())
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert set(row["client_train_j"]) == {"0", "1"}
    for p, s in row["client_train_s"].items():
        assert row["client_train_j"][p] == pytest.approx(5.0 * s)


def test_node_environment_is_the_fallback_and_node_config_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = resolve(full_config({}))[0]
    monkeypatch.setenv("FEDAPP_ENERGY_TEGRASTATS", "/opt/jetson/tegrastats")
    monkeypatch.setenv("FEDAPP_ENERGY_SYSFS_ROOT", "/host/sys")
    s = MeterSettings.of(cfg, {})
    assert (s.tegrastats, s.sysfs_root) == ("/opt/jetson/tegrastats", "/host/sys")
    s = MeterSettings.of(cfg, {"energy-tegrastats": "/usr/bin/tegrastats", "energy-sysfs-root": "/mnt/sys"})
    assert (s.tegrastats, s.sysfs_root) == ("/usr/bin/tegrastats", "/mnt/sys")
    with pytest.raises(ConfigError, match="node-config key 'energy-sysfs-root' = 3 is not allowed"):
        MeterSettings.of(cfg, {"energy-sysfs-root": 3})
