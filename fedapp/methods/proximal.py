"""Which runs add FedProx's proximal term (mu/2)||x - x_global||^2 to local training: method =
fedprox, and any method whose ``base`` optimizer is fedprox (FedPeWS, FedPeWS-Fixed). A rule of the
methods, not of the core config; the keys it reads (``base``, ``proximal-mu``) stay typed in
``fedapp/core/config.py`` with the other base keys, where ``fedapp keys`` lists them. Imports no
torch: the report asks it of a run's recorded config."""

from __future__ import annotations

from fedapp.core.config import RunConfig


def adds_prox(method: str, base: str) -> bool:
    """Whether a run of ``method`` on ``base`` adds the proximal term, i.e. reads ``proximal-mu``."""
    return method == "fedprox" or base == "fedprox"


def uses_prox(cfg: RunConfig) -> bool:
    return adds_prox(cfg.method, cfg.base)


def proximal_mu(cfg: RunConfig) -> float:
    """The proximal weight the run's local training uses: ``proximal-mu``, or 0 where it adds no term."""
    return cfg.proximal_mu if uses_prox(cfg) else 0.0
