"""Fleet profiles: every bad value is named before anything is created; the power model's
joules against hand-computed ones; the repository's profile parses to the documented fleet."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedapp.fleet import FleetError
from fedapp.fleet.power import modelled_joules
from fedapp.fleet.profile import load_profile, parse_profile

ROOT = Path(__file__).resolve().parents[1]
GOOD = {"count": 2, "cpu-share": 0.5, "uplink-mbit": 10, "downlink-mbit": 5, "idle-watts": 2.0, "busy-watts": 7.5}


def one(**changes: object) -> dict[str, object]:
    table = {**GOOD, **changes}
    return {"class": {"mid": {k: v for k, v in table.items() if v is not None}}}


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"count": 0}, "count = 0"),
        ({"count": True}, "count = True"),
        ({"cpu-share": 0.0}, "cpu-share = 0.0"),
        ({"cpu-share": "half"}, "cpu-share = 'half'"),
        ({"uplink-mbit": -1}, "uplink-mbit = -1"),
        ({"downlink-mbit": 0}, "downlink-mbit = 0"),
        ({"memory-mb": 10}, "memory-mb = 10"),
        ({"active-fraction": 1.5}, "active-fraction = 1.5"),
        ({"busy-watts": 1.0}, "busy-watts = 1 is below idle-watts = 2"),
        ({"uplink": 3}, "unknown key(s) uplink"),
        ({"idle-watts": None}, "lacks idle-watts"),
    ],
)
def test_bad_values_are_named(changes: dict[str, object], named: str) -> None:
    with pytest.raises(FleetError, match="class 'mid'") as err:
        parse_profile(one(**changes))
    assert named in str(err.value)


def test_no_classes_and_bad_files() -> None:
    with pytest.raises(FleetError, match=r"no device classes"):
        parse_profile({"name": "x"})
    with pytest.raises(FleetError, match=r"unknown top-level key\(s\) nodes"):
        parse_profile({"nodes": 3, **one()})
    with pytest.raises(FleetError, match="does not exist"):
        load_profile(ROOT / "configs/fleet/no-such.toml")


def test_repository_profile_is_the_documented_fleet() -> None:
    profile = load_profile(ROOT / "configs/fleet/jetson-mix.toml")
    nodes = profile.nodes()
    assert [c.name for c in nodes] == ["fast"] * 2 + ["mid"] * 3 + ["slow"] * 3
    assert [(c.cpu_share, c.uplink_mbit, c.downlink_mbit) for c in profile.classes] == [(0.8, 50, 50), (0.4, 10, 5), (0.2, 2, 1)]
    assert sum(c.cpu_share for c in nodes) == pytest.approx(3.4)  # what the profile's comment says: 3.4 cores asked of 2


def test_modelled_joules_by_hand() -> None:
    mid = parse_profile(one()).classes[0]  # idle 2 W, busy 7.5 W, share 0.5 of a core
    # 10 s wall, 2 CPU-seconds of the 5 its share allows: 2 + 5.5 * 0.4 = 4.2 W -> 42 J
    assert modelled_joules(mid, 10.0, 2.0) == pytest.approx(42.0)
    assert modelled_joules(mid, 10.0, 0.0) == pytest.approx(20.0)  # idle all along
    assert modelled_joules(mid, 10.0, 6.0) == pytest.approx(75.0)  # cgroup accounting past the quota: never above busy
    assert modelled_joules(mid, 0.0, 0.0) == 0.0
