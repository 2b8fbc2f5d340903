"""Registries generate their lists: pyproject's run-config defaults, the model names, `fedapp keys`."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fedapp.cli import main
from fedapp.core.config import ConfigError, RunConfig, allowed_of, fields_of
from fedapp.methods.fedpart import FedPartParams
from fedapp.methods.fedpews import PeWSParams
from fedapp.methods.fedselect import FedSelectParams
from fedapp.methods.registry import resolve
from fedapp.methods.tiers import TierParams
from fedapp.models import MODELS, build_model, register_model

ROOT = Path(__file__).resolve().parents[1]


def declared_block() -> str:
    """pyproject's run-config block as written: its comment header through its last key."""
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("# Every run-config key with its default")
    return text[start : text.index("\n\n", text.index("[tool.flwr.app.config]"))]


def keys_toml() -> str:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["keys", "--toml"]) == 0
    return out.getvalue()


def test_pyproject_run_config_block_is_what_fedapp_keys_toml_writes() -> None:
    text = keys_toml()
    assert text == declared_block() + "\n"
    table = tomllib.loads(text)["tool"]["flwr"]["app"]["config"]
    # the registries' defaults, independently: every dataclass field once, with its type
    expected = {
        k: f.default for cls in (RunConfig, TierParams, PeWSParams, FedPartParams, FedSelectParams) for k, f in fields_of(cls).items()
    }
    assert table == expected and all(type(table[k]) is type(v) for k, v in expected.items())
    assert table["proximal-mu"] == 0.01 and table["tiers"] == "0.2,0.4,0.6,0.8,1.0" and table["mask-lr"] == 0.1
    assert "# fedspu, fjord, feddrop (TierParams)\ntiers = " in text


def test_a_misspelt_key_gets_the_closest_known_one() -> None:
    with pytest.raises(ConfigError, match=r"unknown run-config key\(s\) mask-lrr \(did you mean 'mask-lr' for 'mask-lrr'\?\)"):
        resolve({"method": "fedpews", "mask-lrr": 0.2})
    with pytest.raises(ConfigError, match=r"unknown run-config key\(s\) zzzz; `fedapp keys`"):
        resolve({"zzzz": 1})


def test_the_model_names_are_the_model_registry() -> None:
    names = ", ".join(MODELS)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["keys"]) == 0
    assert f'  model = "mlp"    [one of {names}]\n' in out.getvalue()
    with pytest.raises(ConfigError, match=re.escape(f"run-config key 'model' = 'vgg' is not allowed: expected one of {names}")):
        resolve({"model": "vgg"})
    assert {"mlp", "cnn-bn", "resnet8"} <= set(MODELS)
    with pytest.raises(ValueError, match="registered twice"):
        register_model("mlp")(MODELS["mlp"])
    model = build_model(RunConfig(model="cnn-bn"), (1, 8, 8), 3, seed=0)
    assert model(__import__("torch").zeros(2, 1, 8, 8)).shape == (2, 3)


def test_the_config_module_imports_no_model_registry() -> None:
    """config.py under the model registry would close a circle (registry -> data -> config)."""
    code = "import sys, fedapp.core.config; print(sorted(m for m in sys.modules if m.startswith('fedapp.models')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"


def test_fedapp_keys_prints_common_and_the_methods_keys_with_default_allowed_and_doc() -> None:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["keys", "fedpews"]) == 0
    text = out.getvalue()
    assert text.startswith('common keys (every method)\n  method = "fedavg"    [one of fedavg, fedprox,')
    assert "\nfedpews keys (PeWSParams)\n" in text and "tiers" not in text  # not another method's keys
    for name, f in fields_of(PeWSParams).items():
        default = f'"{f.default}"' if isinstance(f.default, str) else str(f.default)
        assert f"  {name} = {default}    [{allowed_of(f)}]\n      {f.metadata['doc']}" in text
    assert "  lr = 0.05    [a number in (0, 100]]\n" in text and "  resume = false    [true or false]\n" in text


def test_fedpews_fixed_has_only_the_warmup_key_and_a_mask_key_is_reported_unused() -> None:
    from fedapp.server.run_checks import unused_keys
    from fedapp.sim.run_local import full_config

    raw = full_config({"method": "fedpews-fixed", "mask-impl": "activation", "warmup-fraction": 0.25})
    cfg, method, params = resolve(raw)
    assert set(fields_of(type(params))) == {"warmup-fraction"} and params.warmup_fraction == 0.25
    assert unused_keys(raw, cfg, method) == [
        "run-config key 'mask-impl' = 'activation' is not used by method 'fedpews-fixed' (used by fedpews); ignored"
    ]
