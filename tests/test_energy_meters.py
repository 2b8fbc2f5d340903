"""Meter back ends against sysfs fixture trees and recorded tegrastats output; integration of power traces."""

from __future__ import annotations

import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedapp.core.config import ConfigError
from fedapp.energy.auto import MeterSettings, open_sensors
from fedapp.energy.base import MeterUnavailable, integrate
from fedapp.energy.jetson import JetsonRails
from fedapp.energy.nvml import Nvml
from fedapp.energy.rapl import Rapl
from fedapp.energy.sampler import Sampler
from fedapp.energy.tegrastats import Tegrastats, parse_line
from tests.energy_fixtures import AGX_ORIN_LINE, NANO_LINE, ORIN_NANO_LINE, RAPL_MAX, ina238_hwmon, nano_iio, orin_hwmon, rapl_tree, write

# -- Jetson sysfs rails ---------------------------------------------------------------------


def test_orin_hwmon_reads_board_input_rail_as_volts_times_amps(tmp_path: Path) -> None:
    orin_hwmon(tmp_path)
    meter = JetsonRails(tmp_path)
    assert meter.available == ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]  # no "sum of shunt voltages", symlink not counted twice
    assert meter.rails == ["VDD_IN"]
    assert meter.read() == pytest.approx(5.072 * 1.104)


def test_orin_hwmon_sums_named_rails(tmp_path: Path) -> None:
    orin_hwmon(tmp_path)
    meter = JetsonRails(tmp_path, ["vdd_cpu_gpu_cv", "VDD_SOC"])
    assert meter.rails == ["VDD_CPU_GPU_CV", "VDD_SOC"]
    assert meter.read() == pytest.approx(5.064 * 0.102 + 5.056 * 0.275)


def test_nano_iio_rails_in_milliwatts(tmp_path: Path) -> None:
    nano_iio(tmp_path)
    meter = JetsonRails(tmp_path)
    assert meter.available == ["POM_5V_IN", "POM_5V_GPU", "POM_5V_CPU"]
    assert meter.read() == pytest.approx(2.211)
    assert JetsonRails(tmp_path, ["POM_5V_GPU", "POM_5V_CPU"]).read() == pytest.approx(0.360)


def test_ina238_power_file_in_microwatts(tmp_path: Path) -> None:
    ina238_hwmon(tmp_path)
    meter = JetsonRails(tmp_path)
    assert meter.available == ["ina238@hwmon3"]
    assert meter.read() == pytest.approx(7.25)


def test_jetson_rails_follow_the_files(tmp_path: Path) -> None:
    hw = orin_hwmon(tmp_path)
    meter = JetsonRails(tmp_path)
    write(hw / "in1_input", 5000)
    write(hw / "curr1_input", 2000)
    assert meter.read() == pytest.approx(10.0)


# -- tegrastats -------------------------------------------------------------------------------


def test_tegrastats_lines_from_nano_and_orin() -> None:
    assert parse_line(NANO_LINE) == {"POM_5V_IN": 2.545, "POM_5V_GPU": 0.0, "POM_5V_CPU": 0.549}
    assert parse_line(ORIN_NANO_LINE) == {"VDD_IN": 4.926, "VDD_CPU_GPU_CV": 0.514, "VDD_SOC": 1.389}
    assert parse_line(AGX_ORIN_LINE) == {"VDD_GPU_SOC": 2.783, "VDD_CPU_CV": 0.397, "VIN_SYS_5V0": 3.214, "VDDQ_VDD2_1V8AO": 0.503}
    assert parse_line("RAM 2336/62841MB (lfb 14371x4MB) SWAP 0/31421MB (cached 0MB)") == {}


def test_tegrastats_command_is_run_and_followed(tmp_path: Path) -> None:
    log = tmp_path / "nano.log"
    log.write_text(NANO_LINE + "\n")
    printer = tmp_path / "fake_tegrastats.py"  # prints the recorded output every --interval ms, as tegrastats does
    printer.write_text(
        "import sys, time\nline = open(sys.argv[1]).read()\nms = int(sys.argv[sys.argv.index('--interval') + 1])\n"
        "while True:\n    print(line, end='', flush=True)\n    time.sleep(ms / 1000)\n"
    )
    meter = Tegrastats(f"{shlex.quote(sys.executable)} {shlex.quote(str(printer))} {shlex.quote(str(log))}", interval=0.05)
    try:
        assert meter.rails == ["POM_5V_IN"]
        assert meter.read() == pytest.approx(2.545)
        assert meter._proc is not None and meter._proc.poll() is None
    finally:
        meter.close()
    assert meter._proc.poll() is not None


def test_tegrastats_logfile_followed_and_rails_chosen(tmp_path: Path) -> None:
    log = tmp_path / "orin.log"
    log.write_text(AGX_ORIN_LINE + "\n")
    meter = Tegrastats(str(log), interval=0.01)
    try:
        assert meter.rails == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]  # AGX Orin: no VDD_IN, all rails
        assert meter.read() == pytest.approx(2.783 + 0.397 + 3.214 + 0.503)
        with log.open("a") as fh:
            fh.write(AGX_ORIN_LINE.replace("VDD_GPU_SOC 2783mW/2783mW", "VDD_GPU_SOC 9000mW/4000mW") + "\n")
        deadline = time.monotonic() + 5
        while meter.read() < 9 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert meter.read() == pytest.approx(9.0 + 0.397 + 3.214 + 0.503)
    finally:
        meter.close()


def test_tegrastats_missing_command_is_unavailable() -> None:
    with pytest.raises(MeterUnavailable, match="tegrastats"):
        Tegrastats("/nonexistent/tegrastats")


# -- RAPL -------------------------------------------------------------------------------------


def test_rapl_sums_package_and_dram_and_handles_wrap(tmp_path: Path) -> None:
    base = rapl_tree(tmp_path, package_uj=RAPL_MAX - 1_000_000, dram_uj=7_000_000)
    meter = Rapl(tmp_path)
    assert meter.rails == ["package-0", "package-0/dram"]  # not core (inside the package), not the mmio duplicate
    assert meter.read() == 0.0
    write(base / "intel-rapl:0/energy_uj", 2_500_000)  # wrapped: 1 J to the top + 2.5 J after 0
    write(base / "intel-rapl:0:2/energy_uj", 7_400_000)  # +0.4 J
    assert meter.read() == pytest.approx(3.5 + 0.4)
    write(base / "intel-rapl:0/energy_uj", 3_500_000)
    assert meter.read() == pytest.approx(4.9)


def test_rapl_named_domain(tmp_path: Path) -> None:
    rapl_tree(tmp_path, 10, 20)
    assert Rapl(tmp_path, ["dram"]).rails == ["package-0/dram"]
    assert Rapl(tmp_path, ["core", "package"]).rails == ["package-0", "package-0/core"]


# -- integration of power into joules -------------------------------------------------------------


def test_integrate_known_traces() -> None:
    t = np.linspace(0, 10, 11)
    assert integrate(t, 3 + 2 * t, 0, 10) == (pytest.approx(130.0), 1.0)  # ∫ 3 + 2t dt over [0, 10]
    assert integrate(t, 3 + 2 * t, 2.5, 4.0)[0] == pytest.approx(3 * 1.5 + (16 - 6.25))  # window edges interpolated
    period = 7.0
    ts = np.linspace(0, period, 2001)
    j, cov = integrate(ts, 10 + 5 * np.sin(2 * math.pi * ts / period), 0, period)
    assert j == pytest.approx(10 * period, rel=1e-6) and cov == 1.0
    j, cov = integrate(t, np.full(11, 4.0), -10, 10)  # the trace covers half the window; nothing extrapolated
    assert j == pytest.approx(40.0) and cov == pytest.approx(0.5)


def test_sampler_integrates_a_rail_trace_by_trapezoids(tmp_path: Path) -> None:
    hw = orin_hwmon(tmp_path, vdd_in=(5000, 1000))  # 5 W
    now = [0.0]
    sampler = Sampler([JetsonRails(tmp_path)], 0.1, clock=lambda: now[0], thread=False)
    trace = [(0.0, 5.0)]
    for t, amps in [(1.0, 2000), (2.5, 2000), (4.0, 500), (4.5, 3000)]:
        write(hw / "curr1_input", amps)
        now[0] = t
        sampler.sample()
        trace.append((t, 5.0 * amps / 1000))
    expected = integrate([p[0] for p in trace], [p[1] for p in trace], 0.0, 4.5)[0]
    assert expected == pytest.approx(0.5 * (5 + 10) * 1 + 10 * 1.5 + 0.5 * (10 + 2.5) * 1.5 + 0.5 * (2.5 + 15) * 0.5)
    assert sampler.sample() == pytest.approx(expected)  # a read at the same instant adds nothing
    now[0] = 5.5
    rep, _ = sampler.report(pid=3)
    assert (rep.span_j, rep.span_s, rep.total_j, rep.total_s, rep.meter) == (
        pytest.approx(expected + 15.0),
        5.5,
        rep.span_j,
        5.5,
        sampler.id,
    )
    now[0] = 6.5
    rep, _ = sampler.report(pid=3)
    assert (rep.span_j, rep.span_s, rep.total_j) == (pytest.approx(15.0), 1.0, pytest.approx(expected + 30.0))
    assert sampler.report(pid=4)[0].span_j == pytest.approx(expected + 30.0)  # a node's first reply: since the meter started


def test_node_meter_continues_across_processes_with_power_rails(tmp_path: Path) -> None:
    """Flower deployment runs each message in a new process: the node's Mark bridges the gap."""
    hw = orin_hwmon(tmp_path, vdd_in=(5000, 1000))  # 5 W
    now = [10.0]
    first = Sampler([JetsonRails(tmp_path)], 0.1, clock=lambda: now[0], thread=False)
    now[0] = 12.0
    rep1, mark = first.report(pid=0)
    assert rep1.total_j == pytest.approx(10.0)
    first.close()
    write(hw / "curr1_input", 3000)  # 15 W when the next process starts
    now[0] = 16.0
    second = Sampler([JetsonRails(tmp_path)], 0.1, clock=lambda: now[0], thread=False)
    now[0] = 17.0
    rep2, mark2 = second.report(pid=0, prev=mark)
    gap = 0.5 * (5 + 15) * 4.0  # linear between the two processes' readings
    assert rep2.meter == first.id and rep2.span_s == pytest.approx(5.0)
    assert rep2.span_j == pytest.approx(gap + 15.0) and rep2.total_j == pytest.approx(10.0 + gap + 15.0)
    now[0] = 1.0  # a reboot: the monotonic clock restarted, the old mark cannot be bridged
    third = Sampler([JetsonRails(tmp_path)], 0.1, clock=lambda: now[0], thread=False)
    rep3, _ = third.report(pid=0, prev=mark2)
    assert rep3.meter == third.id and rep3.total_j == 0.0


def test_node_meter_continues_across_processes_with_rapl_wrap(tmp_path: Path) -> None:
    base = rapl_tree(tmp_path, package_uj=RAPL_MAX - 3_000_000, dram_uj=1_000_000)
    now = [0.0]
    first = Sampler([Rapl(tmp_path)], 0.1, clock=lambda: now[0], thread=False)
    write(base / "intel-rapl:0/energy_uj", RAPL_MAX - 2_000_000)
    now[0] = 1.0
    rep1, mark = first.report(pid=5)
    assert rep1.total_j == pytest.approx(1.0)
    write(base / "intel-rapl:0/energy_uj", 4_000_000)  # wrapped while no process ran: 2 J + 4 J
    write(base / "intel-rapl:0:2/energy_uj", 1_500_000)  # +0.5 J
    now[0] = 30.0
    second = Sampler([Rapl(tmp_path)], 0.1, clock=lambda: now[0], thread=False)
    write(base / "intel-rapl:0/energy_uj", 5_000_000)
    now[0] = 31.0
    rep2, _ = second.report(pid=5, prev=mark)
    assert rep2.span_j == pytest.approx(6.5 + 1.0) and rep2.total_j == pytest.approx(8.5) and rep2.meter == first.id


def test_sampler_with_an_energy_counter_windows_exactly(tmp_path: Path) -> None:
    base = rapl_tree(tmp_path, package_uj=1_000_000, dram_uj=0)
    sampler = Sampler([Rapl(tmp_path)], 0.1, thread=False)
    with sampler.window() as w:
        write(base / "intel-rapl:0/energy_uj", 13_000_000)
        write(base / "intel-rapl:0:2/energy_uj", 2_000_000)
    assert w.joules == pytest.approx(14.0) and w.seconds > 0 and w.end >= w.start


def test_background_thread_samples_and_stops(tmp_path: Path) -> None:
    orin_hwmon(tmp_path)
    sampler = Sampler([JetsonRails(tmp_path)], 0.01)
    deadline = time.monotonic() + 10
    while sampler.samples < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.close()
    assert sampler.samples >= 4
    stopped = sampler.samples
    time.sleep(0.05)
    assert sampler.samples == stopped


# -- choosing a meter -----------------------------------------------------------------------------


def nothing_here(tmp_path: Path, meter: str, rails: str = "") -> MeterSettings:
    return MeterSettings(meter=meter, rails=rails, sysfs_root=str(tmp_path), tegrastats=str(tmp_path / "no-tegrastats"))


def test_auto_without_meters_is_time_only(tmp_path: Path) -> None:
    sensors, text = open_sensors(nothing_here(tmp_path, "auto"))
    assert sensors == []
    assert "no meter on this device, recording time only" in text
    for looked in ("ina3221", "tegrastats", "nvml", "powercap"):
        assert looked in text


def test_auto_prefers_jetson_rails(tmp_path: Path) -> None:
    orin_hwmon(tmp_path)
    rapl_tree(tmp_path, 1, 1)
    sensors, text = open_sensors(nothing_here(tmp_path, "auto"))
    assert [s.name for s in sensors] == ["jetson"] and "VDD_IN" in text


def test_auto_takes_rapl_when_no_jetson(tmp_path: Path) -> None:
    rapl_tree(tmp_path, 1, 1)
    sensors, text = open_sensors(nothing_here(tmp_path, "auto"))
    assert "rapl" in [s.name for s in sensors] and "package-0" in text


@pytest.mark.parametrize(("meter", "looked_for"), [("rapl", "powercap"), ("jetson", "ina3221"), ("jetson+rapl", "ina3221")])
def test_explicit_meter_missing_names_key_value_and_place(tmp_path: Path, meter: str, looked_for: str) -> None:
    with pytest.raises(ConfigError) as err:
        open_sensors(nothing_here(tmp_path, meter))
    assert "'energy-meter'" in str(err.value) and repr(meter) in str(err.value) and looked_for in str(err.value)


def test_nvml_without_driver_fails_clearly() -> None:
    try:
        meter = Nvml()
    except MeterUnavailable as err:
        assert "nvidia-ml-py" in str(err) or "NVIDIA driver" in str(err)
    else:  # a machine with an NVIDIA driver: the meter must then read something sensible
        assert meter.read() >= 0
        meter.close()


def test_unknown_rail_names_key_and_available(tmp_path: Path) -> None:
    orin_hwmon(tmp_path)
    with pytest.raises(ConfigError) as err:
        open_sensors(nothing_here(tmp_path, "jetson", rails="VDD_GPU"))
    assert "'energy-rails'" in str(err.value) and "VDD_GPU" in str(err.value) and "VDD_SOC" in str(err.value)


@pytest.mark.parametrize("value", ["wattmeter", "rapl+rapl", "rapl+external", "", "RAPL"])
def test_energy_meter_value_checked(value: str) -> None:
    from fedapp.core.config import RunConfig, parse

    with pytest.raises(ConfigError, match="'energy-meter'"):
        parse(RunConfig, {"energy-meter": value})
    assert parse(RunConfig, {"energy-meter": "nvml+rapl"}).energy_meter == "nvml+rapl"


class FakeNvml:
    """NVML's Python calls (their own names) for two GPUs, the second cut into MIG instances: no driver here."""

    NVML_DEVICE_MIG_ENABLE = 1

    class NVMLError(Exception):
        pass

    def __init__(self, mig: tuple[int, ...]):
        self.mig = mig

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return 1000 * (h + 1)

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        return (1, 1) if h in self.mig else (0, 0)


@pytest.mark.parametrize(("mig", "rails", "says"), [((1,), None, "MIG on for GPU 1"), ((1,), ["0"], None), ((), None, None)])
def test_nvml_under_mig_says_it_meters_the_whole_gpu(
    monkeypatch: pytest.MonkeyPatch, mig: tuple[int, ...], rails: list[str] | None, says: str | None
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(mig))
    meter = Nvml(rails)
    text = meter.describe()
    if says is None:
        assert "MIG" not in text
    else:
        assert says in text and "cannot meter one instance" in text
    assert meter.read() == (1.0 if rails == ["0"] else 3.0)  # mJ counters 1000 and 2000 -> J
