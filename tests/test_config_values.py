"""How a run-config value is read (text from the CLI or TOML, or a typed value) and refused, word for word."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fedapp.core.config import (
    ALLOWED,
    ConfigError,
    RunConfig,
    allowed_of,
    check_known,
    client_batch_check,
    coerce,
    fields_of,
    flatten,
    integer_in,
    key,
    load_toml_config,
    number_in,
    one_of,
    parse,
    parse_overrides,
    rule,
    shown,
)


@pytest.mark.parametrize(
    ("value", "default", "want"),
    [
        (True, False, True), ("true", False, True), ("TRUE", False, True), ("False", True, False), ("false", True, False),
        (3, 0, 3), (3.0, 0, 3), ("12", 0, 12), ("-4", 0, -4),
        (2, 0.5, 2.0), ("2.5", 0.5, 2.5), ("1e-3", 0.5, 0.001),
        ("fedavg", "", "fedavg"),
    ],
)  # fmt: skip
def test_values_are_read_as_the_type_of_their_default(value: object, default: bool | int | float | str, want: object) -> None:
    got = coerce("k", value, default)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize(
    ("value", "default", "why"),
    [
        ("yes", False, "'yes': expected true or false"),
        (1, False, "1: expected true or false"),
        (True, 0, "True: expected an integer"),
        (2.5, 0, "2.5: expected an integer"),
        ("2.0", 0, "'2.0': expected an integer"),
        ("x", 0, "'x': expected an integer"),
        (False, 0.5, "False: expected a number"),
        ("fast", 0.5, "'fast': expected a number"),
        (None, 0.5, "None: expected a number"),
        (7, "", "7 is not allowed: expected text (quote it: k='...')"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_naming_key_and_value(value: object, default: bool | int | float | str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        coerce("k", value, default)
    assert str(err.value) == f"run-config key 'k' = {why}"


def test_unknown_keys_are_listed_sorted_with_the_closest_known_key() -> None:
    check_known({"lr": 1, "seed": 2}, {"lr", "seed"})
    with pytest.raises(ConfigError) as err:
        check_known({"lr": 1, "num-round": 2, "zzz": 3, "learning-rat": 4}, {"lr", "num-rounds", "num-clients", "learning-rate"})
    assert str(err.value) == (
        "unknown run-config key(s) learning-rat, num-round, zzz (did you mean 'learning-rate' for 'learning-rat'?)"
        " (did you mean 'num-rounds' for 'num-round'?); `fedapp keys` lists every key with its doc"
    )


def test_what_a_key_allows_comes_from_its_check_or_its_type() -> None:
    fields = fields_of(RunConfig)
    assert allowed_of(fields["client-batch"]) == "auto or a whole number >= 1"  # what `fedapp keys` prints
    assert allowed_of(fields["lr"]) == "a number in (0, 100]"
    assert allowed_of(fields["resume"]) == "true or false" and allowed_of(fields["method"]) == "text"
    plain = {f.name: f for f in dataclasses.fields(Plain)}
    assert [allowed_of(plain[k]) for k in ("i", "f", "b", "s")] == ["an integer", "a number", "true or false", "text"]
    assert allowed_of(plain["unnamed"]) == ""  # a check that never said what it allows


@dataclasses.dataclass
class Plain:
    i: int = 3
    f: float = 0.5
    b: bool = False
    s: str = "x"
    unnamed: int = dataclasses.field(default=1, metadata={"check": lambda v: None})


@pytest.mark.parametrize(
    ("value", "ok"), [("auto", True), ("1", True), ("16", True), (8, True), ("0", False), ("AUTO", False), ("-1", False), ("2x", False)]
)
def test_client_batch_is_auto_or_a_whole_number_from_one(value: object, ok: bool) -> None:
    assert client_batch_check(value) == (None if ok else "auto or a whole number >= 1")


def test_checks_built_from_rules_say_what_they_allow_in_the_error_and_in_fedapp_keys() -> None:
    pick = one_of("sgd", "adam")
    assert pick("adam") is None and pick("SGD") == "one of sgd, adam" and ALLOWED[pick] == "one of sgd, adam"
    small = rule("a number < 3", lambda v: v < 3)
    assert small(2) is None and small(3) == "a number < 3" and ALLOWED[small] == "a number < 3"
    f = key(4, small, "how many")
    assert f.default == 4 and f.metadata == {"check": small, "doc": "how many", "numbers": ()}
    assert key(1).metadata == {"check": None, "doc": "", "numbers": ()}


def test_parse_reads_given_keys_keeps_defaults_and_refuses_non_finite_numbers() -> None:
    cfg = parse(RunConfig, {"lr": "0.5", "num-server-rounds": 3})
    assert cfg.lr == 0.5 and cfg.num_server_rounds == 3 and cfg.momentum == 0.0
    with pytest.raises(ConfigError) as err:
        parse(RunConfig, {"lr": "inf"})
    assert str(err.value) == "run-config key 'lr' = inf is not allowed: expected a finite number"


def test_overrides_and_toml_files_read_as_flwr_run_reads_them(tmp_path: Path) -> None:
    assert parse_overrides("lr=0.1 method='fedprox' note=a=b tiers=\"0.5,1.0\" flag=true") == {
        "lr": 0.1, "method": "fedprox", "note": "a=b", "tiers": "0.5,1.0", "flag": True,
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"^override 'lr' is not of the form key=value$"):
        parse_overrides("lr")
    (tmp_path / "c.toml").write_text('lr = 0.2\n[fedselect]\npersonal-rate = 0.5\n[a.b]\nc = "x"\n')
    assert load_toml_config(tmp_path / "c.toml") == {"lr": 0.2, "fedselect.personal-rate": 0.5, "a.b.c": "x"}
    assert flatten({"x": 1, "t": {"y": 2}}, "p.") == {"p.x": 1, "p.t.y": 2}
    with pytest.raises(ConfigError, match=rf"^run-config file '{tmp_path}/none.toml' does not exist$"):
        load_toml_config(tmp_path / "none.toml")
    (tmp_path / "bad.toml").write_text("lr = = 1\n")
    with pytest.raises(ConfigError, match=rf"^run-config file '{tmp_path}/bad.toml' is not valid TOML: "):
        load_toml_config(tmp_path / "bad.toml")
    (tmp_path / "bin.toml").write_bytes(b"lr = '\xff'\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_toml_config(tmp_path / "bin.toml")


def test_an_unknown_key_with_two_close_known_keys_names_only_the_closest() -> None:
    with pytest.raises(ConfigError) as err:
        check_known({"seeds": 1}, {"seed", "seeds-x", "data-seed"})
    assert (
        str(err.value) == "unknown run-config key(s) seeds (did you mean 'seed' for 'seeds'?); `fedapp keys` lists every key with its doc"
    )


def test_range_checks_built_at_call_time_say_and_do_what_their_bounds_say() -> None:
    """The run-config's fields build their checks when fedapp.core.config is imported; these build them
    here, so that a mutation of number_in, integer_in or shown is seen (mutmut switches mutants after
    the import)."""
    closed = number_in(0.5, 2.5)
    assert ALLOWED[closed] == "a number in [0.5, 2.5]"
    assert [closed(v) for v in (0.5, 2.5, 1.0)] == [None, None, None]
    assert closed(0.4999) == closed(2.5001) == "a number in [0.5, 2.5]"
    opened = number_in(0, 100, low_open=True)
    assert ALLOWED[opened] == "a number in (0, 100]"
    assert opened(0) == "a number in (0, 100]" and opened(1e-9) is None and opened(100) is None and opened(100.5) is not None
    whole = integer_in(1, 10)
    assert ALLOWED[whole] == "an integer in 1..10"
    assert [whole(v) for v in (0, 1, 10, 11)] == ["an integer in 1..10", None, None, "an integer in 1..10"]
    assert [shown(v) for v in (3.0, 3, 0.001, 1e6, -2.0, 2.5)] == ["3", "3", "0.001", "1000000", "-2", "2.5"]
