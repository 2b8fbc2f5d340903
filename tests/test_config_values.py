"""How a run-config value is read (text from the CLI or TOML, or a typed value) and refused, word for word."""

from __future__ import annotations

import dataclasses

import pytest

from fedapp.config import ConfigError, RunConfig, allowed_of, check_known, client_batch_check, coerce, fields_of


@pytest.mark.parametrize(
    ("value", "default", "want"),
    [
        (True, False, True), ("true", False, True), ("TRUE", False, True), ("False", True, False), ("false", True, False),
        (3, 0, 3), (3.0, 0, 3), ("12", 0, 12), ("-4", 0, -4),
        (2, 0.5, 2.0), ("2.5", 0.5, 2.5), ("1e-3", 0.5, 0.001),
        (7, "", "7"), ("fedavg", "", "fedavg"),
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
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_naming_key_and_value(value: object, default: bool | int | float, why: str) -> None:
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
    assert allowed_of(fields["lr"]) == "a number > 0"
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
