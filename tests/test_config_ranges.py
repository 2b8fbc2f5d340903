"""Every number a run-config takes has a range (docs/faults.md, "Run-config ranges"), every text key
takes text: hundreds of generated values, finite extremes included, are each accepted inside the
documented range and refused outside it with one line naming the key and the value, before any
training. The ranges below are copied from the docs, not read from the code."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from fedapp.cli import main
from fedapp.core.config import ConfigError, fields_of, parse_overrides
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.registry import all_param_classes, resolve
from fedapp.server.loop import serve
from fedapp.server.run_checks import check_sgd_decay
from fedapp.sim.run_local import full_config

# key -> (low, high, low included, high included, whole numbers only), as docs/faults.md states them
DAY = 86400
RANGES: dict[str, tuple[float, float, bool, bool, bool]] = {
    "data-seed": (0, 2**32 - 1, True, True, True),
    "seed": (0, 2**32 - 1, True, True, True),
    "input-noise": (0, 100, True, True, False),
    "dirichlet-alpha": (1e-3, 1e6, True, True, False),
    "classes-per-client": (1, 1000, True, True, True),
    "min-partition-size": (0, 10**7, True, True, True),
    "num-clients": (0, 10**7, True, True, True),
    "samples-per-client": (0, 10**7, True, True, True),
    "personalized-eval-every": (1, 10**6, True, True, True),
    "num-server-rounds": (1, 10**6, True, True, True),
    "local-epochs": (0, 10**4, True, True, True),
    "local-steps": (0, 10**7, True, True, True),
    "batch-size": (1, 10**7, True, True, True),
    "lr": (0, 100, False, True, False),
    "momentum": (0, 1, True, False, False),
    "weight-decay": (0, 1, True, True, False),
    "server-lr": (0, 100, False, True, False),
    "proximal-mu": (0, 100, True, True, False),
    "trim-fraction": (0, 0.5, False, False, False),
    "norm-bound-factor": (0, 1000, False, True, False),
    "fraction-train": (0, 1, False, True, False),
    "min-replies": (1, 10**7, True, True, True),
    "round-timeout": (0, 30 * DAY, False, True, False),
    "discovery-timeout": (0, 30 * DAY, False, True, False),
    "num-threads": (1, 1024, True, True, True),
    "target-accuracy": (0, 1, True, True, False),
    "energy-interval": (1e-3, 3600, True, True, False),
    "local-test-fraction": (0, 1, True, False, False),  # or exactly -1 (auto)
    "personal-rate": (0, 1, False, True, False),
    "personal-limit": (0, 1, True, True, False),
    "mask-update-every": (1, 10**6, True, True, True),
    "local-alt-epochs": (1, 10**4, True, True, True),
    "warmup-rounds": (0, 10**6, True, True, True),
    "rounds-per-layer": (1, 10**6, True, True, True),
    "cycles": (0, 10**6, True, True, True),
    "full-rounds-between-cycles": (0, 10**6, True, True, True),
    "es-lambda": (0, 1, True, True, False),
    "warmup-fraction": (0, 1, True, True, False),
    "diversity-weight": (0, 100, True, True, False),
    "mask-lr": (0, 100, False, True, False),
    "mask-init": (-16, 16, True, True, False),
}
OWNER = {  # a method that reads the key (a method's own keys are parsed only for that method)
    **dict.fromkeys(("personal-rate", "personal-limit", "mask-update-every", "local-alt-epochs"), "fedselect"),
    **dict.fromkeys(("warmup-rounds", "rounds-per-layer", "cycles", "full-rounds-between-cycles"), "fedpart"),
    "es-lambda": "fedspu",
    **dict.fromkeys(("warmup-fraction", "diversity-weight", "mask-lr", "mask-init"), "fedpews"),
}
EXTREMES: list[float] = [
    -1e308, -1e300, -1e18, -(2**63), -1e6, -1000, -17, -16.5, -1, -0.5, -1e-300, 0, 1e-300, 1e-4, 1e-3, 0.5, 1, 2, 16, 16.5, 17,
    100, 100.5, 1000, 1024, 1025, 3600, 3601, 1e4, 1e6, 1e7, 2**31, 2**32, 2**32 - 1, 30 * DAY, 30 * DAY + 1, 1e18, 2**63, 1e300, 1e308,
]  # fmt: skip


def numeric_keys() -> dict[str, Any]:
    return {k: f for cls in all_param_classes() for k, f in fields_of(cls).items() if type(f.default) in (int, float)}


def text_keys() -> dict[str, Any]:
    return {k: f for cls in all_param_classes() for k, f in fields_of(cls).items() if type(f.default) is str}


def test_every_numeric_key_has_a_documented_range() -> None:
    assert set(numeric_keys()) == set(RANGES)


def inside(key: str, v: float) -> bool:
    lo, hi, lo_in, hi_in, whole = RANGES[key]
    if whole and not float(v).is_integer():
        return False
    if key == "local-test-fraction" and v == -1:
        return True
    return (lo <= v if lo_in else lo < v) and (v <= hi if hi_in else v < hi)


def values_for(key: str) -> list[float]:
    lo, hi, _, _, whole = RANGES[key]
    edges = [lo - 1, lo, lo + 1, hi - 1, hi, hi + 1] if whole else [math.nextafter(lo, -math.inf), lo, hi, math.nextafter(hi, math.inf)]
    return sorted({*EXTREMES, *edges}, key=float)


@pytest.mark.parametrize("key", sorted(RANGES))
def test_generated_values_are_taken_inside_the_range_and_refused_outside_naming_key_and_value(key: str) -> None:
    base = {"method": OWNER[key]} if key in OWNER else {}
    whole = RANGES[key][4]
    taken = refused = 0
    for v in values_for(key):
        raw = full_config({**base, key: v})
        if inside(key, v):
            cfg, _, params = resolve(raw)
            got = getattr(params if key in OWNER else cfg, key.replace("-", "_"))
            if key == "local-test-fraction" and v == -1:
                continue  # auto: resolved to the method's default
            assert got == v and type(got) is (int if whole else float), (key, v, got)
            taken += 1
            continue
        with pytest.raises(ConfigError) as err:
            resolve(raw)
        text = str(err.value)
        shown = {repr(v), repr(float(v))} | ({repr(int(v))} if float(v).is_integer() else set())
        assert f"run-config key '{key}' = " in text and any(s in text for s in shown) and "\n" not in text, (key, v, text)
        refused += 1
    assert taken >= 3 and refused >= 10, (key, taken, refused)


class NoNodes(LocalGrid):
    def get_node_ids(self) -> list[int]:
        raise AssertionError("discovery started: the check should have come first")


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"method": "fedpews", "mask-init": -1000}, "'mask-init' = -1000.0 is not allowed: expected a number in [-16, 16]"),
        ({"lr": 1e308}, "'lr' = 1e+308 is not allowed: expected a number in (0, 100]"),
        ({"weight-decay": 1e300}, "'weight-decay' = 1e+300 is not allowed: expected a number in [0, 1]"),
        ({"input-noise": 1e300}, "'input-noise' = 1e+300 is not allowed: expected a number in [0, 100]"),
        ({"method": "fedprox", "proximal-mu": 1e300}, "'proximal-mu' = 1e+300 is not allowed: expected a number in [0, 100]"),
        ({"method": "fedpews", "mask-lr": 1e300}, "'mask-lr' = 1e+300 is not allowed: expected a number in (0, 100]"),
        ({"method": "fedpews", "diversity-weight": 1e300}, "'diversity-weight' = 1e+300 is not allowed: expected a number in [0, 100]"),
        ({"lr": 10.0, "weight-decay": 0.2}, "lr x (weight-decay) = 2; expected less than 2 x (1 + momentum) = 2"),
        (
            {"method": "fedprox", "lr": 1.0, "proximal-mu": 3.0, "momentum": 0.4},
            "'proximal-mu' = 3 and 'momentum' = 0.4 make SGD diverge: lr x (weight-decay + proximal-mu) = 3; expected less than",
        ),
    ],
)
def test_the_probed_extremes_stop_the_server_before_discovery(tmp_path: Path, override: dict[str, Any], needle: str) -> None:
    """Each of these once crashed the ServerApp (mask-init) or trained nothing and exited 0."""
    from fedapp.client_app import app

    raw = full_config({"num-clients": 2, "run-dir": str(tmp_path / "run"), **override})
    with pytest.raises(ConfigError) as err:
        serve(NoNodes(app, raw, 2), raw)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert not (tmp_path / "run").exists()


def test_the_mask_init_bound_is_where_float32_sigmoid_stops_moving() -> None:
    """±16: torch's float32 sigmoid is strictly inside (0, 1) with a non-zero slope; at 17 it is exactly 1
    (the score's gradient vanishes, the neuron is kept for good)."""
    s = torch.tensor([-16.0, 16.0, 17.0])
    p = torch.sigmoid(s)
    assert p[0] > 0 and p[1] < 1 and (p * (1 - p))[:2].min() > 0 and p[2] == 1
    assert resolve(full_config({"method": "fedpews", "mask-init": -16}))[2].mask_init == -16


@pytest.mark.parametrize(("momentum", "pull"), [(0.0, 0.2), (0.9, 0.1)])
def test_the_sgd_decay_bound_is_where_torchs_sgd_starts_to_grow_the_weights(momentum: float, pull: float) -> None:
    """The bound lr x (weight-decay + proximal-mu) < 2 x (1 + momentum), checked against torch.optim.SGD on
    weight decay alone (zero data loss): just below it the weight shrinks, just above it grows."""
    limit = 2 * (1 + momentum)
    for factor, grows in ((0.98, False), (1.02, True)):
        lr = factor * limit / pull
        w = torch.nn.Parameter(torch.ones(1, dtype=torch.float64))
        opt = torch.optim.SGD([w], lr=lr, momentum=momentum, weight_decay=pull)
        for _ in range(400):
            opt.zero_grad()
            (w * 0).sum().backward()
            opt.step()
        assert (abs(w.item()) > 1) == grows, (lr, w.item())
        raw = full_config({"lr": lr, "weight-decay": pull, "momentum": momentum, "num-clients": 2})
        if grows:
            with pytest.raises(ConfigError, match="make SGD diverge"):
                check_sgd_decay(resolve(raw)[0])
        else:
            check_sgd_decay(resolve(raw)[0])


NUMBER_TEXT: dict[str, tuple[type, ...]] = {
    "client-batch": (int,),
    "engine-workers": (int,),
    "mlp-hidden": (int,),
    "energy-rails": (int,),
    "tiers": (int, float),
}
TEXT_OWNER = {"tiers": "fedspu", "personal-selection": "fedselect", "layer-order": "fedpart", "bn-eval-stats": "fedpart"}
TEXT_OWNER |= dict.fromkeys(("es-compare", "mask-transport", "kept-rounding"), "fedspu")
TEXT_OWNER |= dict.fromkeys(("mask-draw", "diversity-ref", "mask-impl", "mask-extent", "ste"), "fedpews")


@pytest.mark.parametrize("key", sorted(text_keys()))
def test_text_keys_take_text_not_numbers_or_lists(key: str) -> None:
    base = {"method": TEXT_OWNER[key]} if key in TEXT_OWNER and key != "method" else {}
    for v in (1, 0.5, True, [1, 2], ["a"], {"a": 1}):
        raw = full_config({**base, key: v})
        if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(v, NUMBER_TEXT.get(key, ())):
            cfg, _, params = resolve(raw)
            assert getattr(params if key in TEXT_OWNER else cfg, key.replace("-", "_")) == str(v)
            continue
        with pytest.raises(ConfigError) as err:
            resolve(raw)
        assert f"run-config key '{key}' = {v!r} is not allowed: expected text" in str(err.value), str(err.value)


def fedapp(*argv: str) -> tuple[int, str]:
    with contextlib.redirect_stderr(io.StringIO()) as err:
        code = main(list(argv))
    return code, err.getvalue()


def test_run_dir_5_makes_no_folder_and_says_to_quote_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = fedapp("run", "--no-progress", "run-dir=5 num-server-rounds=1 energy-meter='none'")
    assert code == 2 and "run-config key 'run-dir' = 5 is not allowed: expected text (quote it: run-dir='...')" in err
    assert list(tmp_path.iterdir()) == []
    assert parse_overrides("run-dir='5'") == {"run-dir": "5"}  # quoted, it is text
    assert resolve(full_config({"run-dir": tmp_path / "5"}))[0].run_dir == str(tmp_path / "5")  # a Path from Python is text


@pytest.mark.parametrize("text", ["run-dir='oops", 'method="fedprox lr=0.1', "lr=0.1 data-root=a\\"])
def test_an_unbalanced_quote_in_the_overrides_is_one_line_not_a_traceback(text: str) -> None:
    with pytest.raises(ConfigError, match=r"run-config overrides .* cannot be split into key=value items: No (closing quotation|escaped)"):
        parse_overrides(text)
    code, err = fedapp("run", "--no-progress", text)
    assert code == 2 and err.startswith("fedapp: error: run-config overrides") and err.count("\n") == 1 and "Traceback" not in err
