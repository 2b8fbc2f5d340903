"""Per-round time/energy accounting: the server ledger, runs with a real (fixture-fed) meter,
the wall-plug join and the report's energy columns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from fedapp.cli import main
from fedapp.core.config import ConfigError
from fedapp.energy.auto import close_samplers
from fedapp.energy.external import join
from fedapp.energy.ledger import Ledger
from fedapp.report.compare import load_runs, savings, table
from fedapp.sim.run_local import run_local
from tests.energy_fixtures import orin_hwmon

BASE = {"num-clients": 3, "num-server-rounds": 2, "partition": "iid", "energy-interval": 0.02}


@pytest.fixture(autouse=True)
def _stop_samplers() -> Iterator[None]:
    yield
    close_samplers()


def nodes(sysfs_root: Path) -> list[dict[str, Any]]:
    """Each node's own config: where its meters read sysfs (a run-config cannot say)."""
    return [{"energy-sysfs-root": str(sysfs_root)} for _ in range(3)]  # BASE has 3 clients


def rows_of(run: Path, name: str = "metrics.jsonl") -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / name).read_text().splitlines() if x.strip()]


def test_ledger_by_hand() -> None:
    ledger = Ledger()
    train = {
        0: {"phase-train-s": 2.0, "phase-train-j": 20.0, "meter-span-j": 30.0, "meter-total-j": 30.0, "meter-id": 7.0, "meter-host": 1.0},
        1: {"phase-train-s": 1.0, "phase-train-j": 12.0, "meter-span-j": 40.0, "meter-total-j": 40.0, "meter-id": 8.0, "meter-host": 2.0},
    }
    evals = {1: {"phase-eval-s": 0.5, "phase-eval-j": 3.0, "meter-span-j": 5.0, "meter-total-j": 45.0, "meter-id": 8.0, "meter-host": 2.0}}
    row = ledger.round_row(5.0, 100.0, 105.0, train, evals)
    assert row["client_wait_s"] == {"0": 3.0, "1": 3.5}
    assert (row["train_s"], row["eval_s"], row["wait_s"]) == (3.0, 0.5, 6.5)
    assert row["client_round_j"] == {"0": 30.0, "1": 45.0} and row["client_wait_j"] == {"0": 10.0, "1": 30.0}
    assert (row["train_j"], row["eval_j"], row["round_j"], row["other_j"], row["meters"]) == (32.0, 3.0, 75.0, 40.0, 2)
    # next round: meter 7 moved from 30 J to 50 J, meter 8 from 45 J to 60 J
    train2 = {0: {**train[0], "meter-span-j": 20.0, "meter-total-j": 50.0}, 1: {**train[1], "meter-span-j": 15.0, "meter-total-j": 60.0}}
    assert ledger.round_row(4.0, 105.0, 109.0, train2, {})["round_j"] == 35.0
    shared = {p: {**m, "meter-id": 9.0} for p, m in train2.items()}  # two clients, one meter: counted once
    assert Ledger().round_row(4.0, 0.0, 4.0, shared, {})["round_j"] == 60.0
    assert "round_j" not in Ledger().round_row(1.0, 0.0, 1.0, {0: {"phase-train-s": 0.5}}, {})


def test_run_without_meter_records_time_only(tmp_path: Path) -> None:
    run = run_local({**BASE, "energy-meter": "none", "run-dir": str(tmp_path / "run")})
    rows = rows_of(run)
    for r in rows:
        assert set(r["client_train_s"]) == {"0", "1", "2"}
        for p, s in r["client_train_s"].items():
            assert r["client_wait_s"][p] == pytest.approx(r["seconds"] - s)
            assert r["client_windows"][p]["train"][0] >= r["time_start"] and r["client_windows"][p]["train"][1] <= r["time_end"]
        assert not any(k.endswith("_j") for k in r)
    assert "time only" in json.loads((run / "meters.json").read_text())["0"]


def test_run_with_jetson_rails_meters_each_window(tmp_path: Path) -> None:
    orin_hwmon(tmp_path / "sys", vdd_in=(5000, 2000))  # the board draws a constant 10 W
    run = run_local({**BASE, "energy-meter": "jetson", "run-dir": str(tmp_path / "run")}, nodes(tmp_path / "sys"))
    rows = rows_of(run)
    assert "jetson rails VDD_IN" in json.loads((run / "meters.json").read_text())["2"]
    for r in rows:
        for p, s in r["client_train_s"].items():
            assert r["client_train_j"][p] == pytest.approx(10.0 * s)
        assert r["meters"] == 1  # one process, one meter, counted once
        assert r["train_j"] == pytest.approx(sum(r["client_train_j"].values()))
        assert r["other_j"] == pytest.approx(r["round_j"] - r["train_j"])
        assert r["round_j"] == pytest.approx(10.0 * r["meter_s"])  # the meter's whole round at 10 W
        for p, j in r["client_round_j"].items():  # each client since its own previous reply
            assert j == pytest.approx(10.0 * r["client_span_s"][p]) and j >= r["client_train_j"][p]
    # round 2's meter time runs from the last reply of round 1 to the last of round 2: inside both rounds' wall span
    assert max(rows[1]["client_train_s"].values()) < rows[1]["meter_s"] < rows[1]["time_end"] - rows[0]["time_start"] + 1e-3


def test_explicit_meter_missing_stops_the_run_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'energy-meter' = 'rapl'.*powercap"):
        run_local({**BASE, "energy-meter": "rapl", "run-dir": str(tmp_path / "run")}, nodes(tmp_path))
    with pytest.raises(ConfigError, match="'energy-meter'"):
        run_local({**BASE, "energy-meter": "wattmeter", "run-dir": str(tmp_path / "run2")})


def ramp_integral(a: float, b: float, t0: float, s: float, e: float) -> float:
    """∫ a + b (t - t0) dt over [s, e]."""
    return a * (e - s) + b / 2 * ((e - t0) ** 2 - (s - t0) ** 2)


def test_wall_plug_csv_joined_to_rounds(tmp_path: Path) -> None:
    run = run_local({**BASE, "energy-meter": "external", "run-dir": str(tmp_path / "run")})
    rows = rows_of(run)
    t0, t1 = rows[0]["time_start"] - 5, rows[-1]["time_end"] + 5
    a, b = 30.0, 2.0  # watts = 30 + 2 (t - t0): linear, so the trapezoid rule is exact
    iso = tmp_path / "plug-iso.csv"
    iso.write_text("Date Time,Power (W)\n" + "".join(f"{datetime.fromtimestamp(t).isoformat()},{a + b * (t - t0)}\n" for t in (t0, t1)))
    assert main(["energy", "join", str(run), str(iso)]) == 0
    joined = rows_of(run, "metrics-energy.jsonl")
    for r in joined:
        assert r["external_round_j"]["all"] == pytest.approx(ramp_integral(a, b, t0, r["time_start"], r["time_end"]), rel=1e-6)
        assert r["external_j"] == r["external_round_j"]["all"] and r["external_coverage"] == 1.0
    epoch = tmp_path / "plug-board1.csv"  # a second plug on client 1's board, Unix seconds, log starts late
    mid = (rows[0]["time_start"] + rows[0]["time_end"]) / 2
    epoch.write_text("timestamp,watts\n" + "".join(f"{t!r},{a + b * (t - t0)}\n" for t in (mid, t1)))
    _, joined = join(run, epoch, client=1)
    w = joined[1]["client_windows"]["1"]["train"]
    assert joined[1]["external_train_j"]["1"] == pytest.approx(ramp_integral(a, b, t0, w[0], w[1]), rel=1e-6)
    assert joined[0]["external_round_coverage"]["1"] == pytest.approx(0.5, abs=1e-4)
    assert joined[1]["external_j"] == pytest.approx(joined[1]["external_round_j"]["all"] + joined[1]["external_round_j"]["1"])
    assert len(rows_of(run)) == len(rows) and "external_j" not in rows_of(run)[0]  # metrics.jsonl untouched


def test_report_energy_columns_and_savings(tmp_path: Path) -> None:
    orin_hwmon(tmp_path / "sys", vdd_in=(5000, 2000))
    meter = {"energy-meter": "jetson", "target-accuracy": 0.0}
    long = run_local({**BASE, **meter, "num-server-rounds": 3, "run-dir": str(tmp_path / "long-seed0")}, nodes(tmp_path / "sys"))
    short = run_local({**BASE, **meter, "run-dir": str(tmp_path / "short-seed0")}, nodes(tmp_path / "sys"))
    timed = run_local({**BASE, "energy-meter": "none", "run-dir": str(tmp_path / "timed-seed0")})
    assert "energy" not in table(load_runs([timed]), 0.5)
    md = table(load_runs([long, short]), 0.0)
    assert "total energy J" in md
    long_rows, short_rows = rows_of(long), rows_of(short)
    assert f"| {sum(r['round_j'] for r in long_rows):.1f} | {long_rows[0]['round_j']:.1f} |" in md
    sav = savings(load_runs([long, short]), "long")
    e_saved = 100 * (1 - sum(r["round_j"] for r in short_rows) / sum(r["round_j"] for r in long_rows))
    rounds_saved = 100 * (1 - sum(r["clients"] for r in short_rows) / sum(r["clients"] for r in long_rows))
    acc_lost = 100 * (long_rows[-1]["accuracy"] - short_rows[-1]["accuracy"])
    assert f"| short | {e_saved:.1f} |" in sav and f"| {rounds_saved:.1f} | 2 vs 3 |" in sav
    assert sav.rstrip().endswith(f"| {acc_lost:.2f} |")
    assert main(["report", str(long), str(short), "--out", str(tmp_path / "rep"), "--baseline", "long"]) == 0
    assert (tmp_path / "rep" / "accuracy.png").stat().st_size > 0


def test_meter_mark_survives_context_state_round_trip() -> None:
    from flwr.app import RecordDict

    from fedapp.energy.phases import load_mark, save_mark
    from fedapp.energy.sampler import Mark

    state = RecordDict()
    assert load_mark(state) is None
    mark = Mark(2**52 + 3, 1234.5, 88.25, 17.0, 2**40 + 1, [[5.5], [1.0, 2.0, 3.0]])
    save_mark(state, mark)
    assert load_mark(state) == mark


@pytest.mark.parametrize("name", ["fedspu-es", "fedspu-noes"])
def test_fedspu_energy_run_configs(name: str) -> None:
    from fedapp.core.config import RunConfig, load_toml_config, parse
    from fedapp.methods.registry import MODULES, resolve
    from fedapp.sim.run_local import full_config

    raw = load_toml_config(Path(__file__).resolve().parents[1] / "configs" / "energy" / f"{name}.toml")
    cfg = parse(RunConfig, raw)  # every base key is valid
    assert (cfg.method, raw["early-stopping"], cfg.energy_meter) == ("fedspu", name == "fedspu-es", "auto")
    assert round(cfg.fraction_train * cfg.num_clients) == 5 and cfg.local_test_fraction == 0.3  # spec §7.1: K = 5 of 20
    if "fedspu" in MODULES:  # once FedSPU is merged the whole file must resolve, its own keys included
        resolve(full_config(raw))
