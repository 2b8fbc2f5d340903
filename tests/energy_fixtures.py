"""Sysfs trees and tegrastats output in the real formats, written under a test's tmp dir.

Layouts and units follow the Linux hwmon/powercap ABIs and Jetson Linux: hwmon
``inK_input`` mV, ``currK_input`` mA, ``powerK_input`` µW; the JetPack 4 iio
``in_powerK_input`` mW; powercap ``energy_uj`` µJ. The tegrastats lines are the
formats printed on a Nano (JetPack 4, bare mW) and on Orin (JetPack 5/6, "mW" units).
"""

from __future__ import annotations

from pathlib import Path

NANO_LINE = (
    "RAM 1766/3964MB (lfb 197x4MB) SWAP 0/2048MB (cached 0MB) CPU [24%@1224,15%@1224,13%@1224,10%@1224] EMC_FREQ 0% "
    "GR3D_FREQ 0% PLL@21C CPU@25C PMIC@100C GPU@23.5C AO@33.5C thermal@24.5C POM_5V_IN 2545/2547 POM_5V_GPU 0/0 POM_5V_CPU 549/529"
)
ORIN_NANO_LINE = (
    "08-17-2023 12:41:05 RAM 2336/7620MB (lfb 14x4MB) SWAP 0/3810MB (cached 0MB) CPU [2%@729,1%@729,0%@729,0%@729,off,off] "
    "EMC_FREQ 0%@2133 GR3D_FREQ 0%@[305] VIC_FREQ 729 APE 200 CPU@47.5C SOC2@45.2C SOC0@46.1C GPU@45.9C tj@47.5C "
    "SOC1@45.4C VDD_IN 4926mW/4926mW VDD_CPU_GPU_CV 514mW/514mW VDD_SOC 1389mW/1389mW"
)
AGX_ORIN_LINE = (
    "RAM 2336/62841MB (lfb 14371x4MB) SWAP 0/31421MB (cached 0MB) CPU [0%@729,0%@729,0%@729,0%@729] EMC_FREQ 0%@3199 "
    "GR3D_FREQ 0%@[0,0] VIC_FREQ 729 APE 174 CV0@-256C CPU@45.062C Tboard@35C GPU@-256C tj@45.062C "
    "VDD_GPU_SOC 2783mW/2783mW VDD_CPU_CV 397mW/397mW VIN_SYS_5V0 3214mW/3214mW VDDQ_VDD2_1V8AO 503mW/503mW"
)


def write(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def orin_hwmon(root: Path, vdd_in: tuple[int, int] = (5072, 1104)) -> Path:
    """JetPack 5+ INA3221 at 1-0040 (Orin Nano rails), plus its /sys/class/hwmon symlink. Returns the hwmon dir."""
    hw = root / "bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
    write(hw / "name", "ina3221")
    rails = {1: ("VDD_IN", *vdd_in), 2: ("VDD_CPU_GPU_CV", 5064, 102), 3: ("VDD_SOC", 5056, 275)}
    for k, (label, mv, ma) in rails.items():
        write(hw / f"in{k}_label", label)
        write(hw / f"in{k}_input", mv)
        write(hw / f"curr{k}_input", ma)
        write(hw / f"curr{k}_crit", 15000)
    write(hw / "in7_label", "sum of shunt voltages")
    write(hw / "in7_input", 88)
    (root / "class/hwmon").mkdir(parents=True, exist_ok=True)
    (root / "class/hwmon/hwmon1").symlink_to(hw)
    return hw


def nano_iio(root: Path) -> Path:
    """JetPack 4 Nano: ina3221x iio device with rail_name_K and in_powerK_input (mW)."""
    iio = root / "bus/i2c/drivers/ina3221x/6-0040/iio:device0"
    for k, (label, mw, mv, ma) in enumerate([("POM_5V_IN", 2211, 5024, 440), ("POM_5V_GPU", 0, 5016, 0), ("POM_5V_CPU", 360, 5008, 72)]):
        write(iio / f"rail_name_{k}", label)
        write(iio / f"in_power{k}_input", mw)
        write(iio / f"in_voltage{k}_input", mv)
        write(iio / f"in_current{k}_input", ma)
    return iio


def ina238_hwmon(root: Path, microwatts: int = 7_250_000) -> Path:
    hw = root / "class/hwmon/hwmon3"
    write(hw / "name", "ina238")
    write(hw / "in0_input", 12)
    write(hw / "in1_input", 12040)
    write(hw / "curr1_input", 602)
    write(hw / "power1_input", microwatts)
    write(hw / "temp1_input", 41000)
    return hw


RAPL_MAX = 262_143_328_850


def rapl_tree(root: Path, package_uj: int, dram_uj: int, core_uj: int = 5_000_000) -> Path:
    """intel-rapl:0 package-0 with core (0:0) and dram (0:2) subzones, plus an mmio duplicate."""
    base = root / "class/powercap"
    for zone, name, uj in [
        ("intel-rapl:0", "package-0", package_uj),
        ("intel-rapl:0:0", "core", core_uj),
        ("intel-rapl:0:2", "dram", dram_uj),
    ]:
        write(base / zone / "name", name)
        write(base / zone / "energy_uj", uj)
        write(base / zone / "max_energy_range_uj", RAPL_MAX if name != "dram" else 65_712_999_613)
    write(base / "intel-rapl-mmio:0/name", "package-0")
    write(base / "intel-rapl-mmio:0/energy_uj", 1)
    return base
