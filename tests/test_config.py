"""Run-config: pyproject defaults match the typed config; bad values name the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fedapp.core.config import ConfigError, defaults_of, parse_overrides
from fedapp.methods.registry import all_param_classes, resolve
from fedapp.sim.run_local import full_config

ROOT = Path(__file__).resolve().parents[1]


def pyproject_config() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def test_pyproject_declares_every_key_with_the_dataclass_default() -> None:
    declared = pyproject_config()
    expected: dict[str, object] = {}
    for cls in all_param_classes():
        expected.update(defaults_of(cls))
    assert declared == expected


def test_every_config_file_resolves() -> None:
    files = sorted((ROOT / "configs").glob("*.toml"))
    assert files
    for f in files:
        raw = tomllib.loads(f.read_text())
        resolve(full_config(raw))


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"method": "fedbogus"}, "'method' = 'fedbogus'"),
        ({"lr": -0.1}, "'lr' = -0.1"),
        ({"dirichlet-alpha": 0.0}, "'dirichlet-alpha' = 0.0"),
        ({"num-clients": "many"}, "'num-clients' = 'many'"),
        ({"fraction-train": 1.5}, "'fraction-train' = 1.5"),
        ({"partition": "0,1|2,x"}, "'partition' = '0,1|2,x'"),
        ({"no-such-key": 1}, "unknown run-config key(s) no-such-key"),
    ],
)
def test_bad_values_name_key_value_and_allowed(override: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(full_config(override))
    assert needle in str(err.value)


def test_a_single_class_group_is_a_valid_partition() -> None:
    assert resolve(full_config({"partition": "0,1,2,3", "num-clients": 1}))[0].partition == "0,1,2,3"


def test_overrides_parse_like_flwr_run() -> None:
    assert parse_overrides("lr=0.1 method='fedprox' num-clients=4 momentum=0") == {
        "lr": 0.1,
        "method": "fedprox",
        "num-clients": 4,
        "momentum": 0,
    }
    cfg = resolve(full_config(parse_overrides("lr=1 momentum=0")))[0]
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float)


def test_overrides_apply_toml_files_and_key_value_strings_in_order(tmp_path: Path) -> None:
    from fedapp.core.config import overrides_of

    base = tmp_path / "base.toml"
    base.write_text('method = "fedprox"\nlr = 0.2\nseed = 4\n')
    assert overrides_of([str(base), "lr=0.1 num-clients=3"]) == {"method": "fedprox", "lr": 0.1, "seed": 4, "num-clients": 3}
    assert overrides_of(["seed=9", str(base)])["seed"] == 4  # a later file wins over an earlier string
