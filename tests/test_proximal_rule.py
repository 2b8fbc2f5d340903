"""FedProx's proximal term is a rule of the methods (fedapp/methods/proximal.py): method = fedprox,
or any method on base = fedprox; the client's extra loss, the report and the core follow it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from fedapp.core.train import ProximalTerm
from fedapp.methods.proximal import adds_prox, proximal_mu
from fedapp.methods.registry import resolve
from fedapp.report.provenance import shown
from fedapp.sim.run_local import full_config

CORE = Path(__file__).resolve().parents[1] / "fedapp" / "core"


@pytest.mark.parametrize(
    ("method", "base", "mu"),
    [("fedprox", "fedavg", 0.25), ("fedpews", "fedprox", 0.25), ("fedpews-fixed", "fedprox", 0.25), ("fedavg", "fedprox", 0.25),
     ("fedavg", "fedavg", 0.0), ("fedpews", "fedavg", 0.0), ("fedselect", "fedavg", 0.0)],
)  # fmt: skip
def test_the_proximal_term_is_added_by_fedprox_and_on_base_fedprox(method: str, base: str, mu: float) -> None:
    cfg, m, params = resolve(full_config({"method": method, "base": base, "proximal-mu": 0.25}))
    assert (adds_prox(method, base), proximal_mu(cfg)) == (mu > 0, mu)
    extra = m.client(cfg, params).extra_loss(torch.nn.Linear(2, 1))
    assert (isinstance(extra, ProximalTerm) and extra.mu == mu) if mu else extra is None
    assert shown({"method": method, "base": base, "proximal-mu": 0.25}, "proximal-mu") == (0.25 if mu else None)


def test_the_core_names_no_method_rule() -> None:
    """No module of fedapp/core imports fedapp.methods, nor defines the proximal rule."""
    for path in CORE.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in imported if m.startswith("fedapp.methods")}, path.name
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not defined & {"uses_prox", "adds_prox", "proximal_mu"}, path.name
