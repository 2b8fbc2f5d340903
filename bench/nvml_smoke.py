"""NVML meter smoke test for a machine with an NVIDIA GPU (none here: run it where one is lent).

Opens the nvml back end as a client would, then measures the same windows two ways:
the GPU's total-energy counter (exact, Volta+) and the integral of NVML power readings
sampled in the background. It prints idle and loaded power and the ratio of the two
energy figures (should be near 1; power readings are averaged by the driver, so a few
percent apart is normal).

    pip install nvidia-ml-py   # already a fedapp dependency
    PYTHONPATH=. python bench/nvml_smoke.py [--seconds 10] [--interval 0.05]
"""

from __future__ import annotations

import argparse
import time

from fedapp.energy.auto import MeterSettings, open_sensors
from fedapp.energy.nvml import Nvml
from fedapp.energy.sampler import Sampler


def load_gpu(seconds: float) -> str:
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch has no CUDA")
    except (ImportError, RuntimeError) as err:
        time.sleep(seconds)
        return f"idle only ({err})"
    a = torch.randn(8192, 8192, device="cuda")
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        a = (a @ a).tanh_()
        n += 1
    torch.cuda.synchronize()
    return f"{n} fp32 8192² matmuls"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=0.05)
    args = ap.parse_args()
    print(open_sensors(MeterSettings(meter="nvml"))[1])
    counter, power = Sampler([Nvml(mode="energy")], args.interval), Sampler([Nvml(mode="power")], args.interval)
    for phase in ("idle", "load"):
        with counter.window() as wc, power.window() as wp:
            what = "idle" if phase == "idle" else load_gpu(args.seconds)
            if phase == "idle":
                time.sleep(args.seconds / 2)
        assert wc.joules is not None and wp.joules is not None
        print(
            f"{phase}: {what}: counter {wc.joules:.1f} J / {wc.seconds:.2f} s = {wc.joules / wc.seconds:.1f} W; "
            f"power integral {wp.joules:.1f} J ({power.samples} samples so far); ratio integral/counter {wp.joules / wc.joules:.3f}"
        )
    print(f"sampler thread CPU: {power.cpu_seconds:.3f} s for {power.samples} NVML power reads")
    counter.close()
    power.close()


if __name__ == "__main__":
    main()
