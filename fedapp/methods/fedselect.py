"""FedSelect (Tamirisa et al., CVPR 2024): growing personal subnetworks.

Each client keeps a per-coordinate personal mask (personal.py does the state, the
merge, the upload of global coordinates only, and personalised evaluation). What is
FedSelect's own:

* LocalAlt (Alg. 2): ``local-alt-epochs`` times, one pass over the local data that
  trains only the personal coordinates, then one pass in the same batch order that
  trains only the global ones (F11). A pass over an empty set of coordinates is
  skipped (it would only move BatchNorm statistics).
* GradSelect (Alg. 3): every ``mask-update-every`` rounds, per tensor, move the
  ``round(p * shared)`` shared coordinates that changed most in this round's local
  training into the personal set, but only while the personal fraction is < α and
  never past ``floor(α * n)`` (F5 default: cap exactly, so α = 0 is FedAvg).
  ``personal-selection`` = least / random gives the paper's ablations.

Both run on the job's device: LocalAlt's masks are moved there once per round, and
GradSelect ranks |θ - θ_start| there (only the grown masks come back, to the state store).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from fedapp.batched.fit import local_fit
from fedapp.batched.memory import ClientMemory
from fedapp.core.config import MAX_EPOCHS, MAX_ROUNDS, fraction, integer_in, key, one_of, unit_interval
from fedapp.core.train import TrainStats
from fedapp.methods.base import ClientJob, Method, settings_of
from fedapp.methods.personal import Masks, PersonalClient, PersonalServer


@dataclasses.dataclass(frozen=True)
class FedSelectParams:
    personal_rate: float = key(0.25, fraction, "p: share of a tensor's remaining shared coordinates made personal per mask update")
    personal_limit: float = key(0.3, unit_interval, "α: largest personal fraction of any tensor (capped exactly)")
    mask_update_every: int = key(1, integer_in(1, MAX_ROUNDS), "grow the masks in rounds that are multiples of this")
    local_alt_epochs: int = key(3, integer_in(1, MAX_EPOCHS), "LocalAlt epochs per round, each a personal pass then a shared pass")
    personal_selection: str = key(
        "most", one_of("most", "least", "random"), "which shared coordinates become personal (least, random: ablations)"
    )


def growth_count(n: int, n_personal: int, rate: float, limit: float) -> int:
    """How many shared coordinates of an n-coordinate tensor become personal now."""
    if n == 0 or n_personal / n >= limit:
        return 0
    want = math.floor(rate * (n - n_personal) + 0.5)
    cap = math.floor(limit * n + 1e-9) - n_personal
    return max(0, min(want, cap))


def top_k(score: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, ties at the cutoff by lowest index (F16), in O(n)."""
    if k >= score.size:
        return np.arange(score.size)
    cut = np.partition(score, score.size - k)[score.size - k]
    above = np.flatnonzero(score > cut)
    return np.concatenate([above, np.flatnonzero(score == cut)[: k - above.size]])


def top_k_mask(score: torch.Tensor, eligible: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`top_k` over the ``eligible`` entries of ``score`` as a bool mask, on score's device:
    the k largest, ties at the cutoff by lowest index (no host sync)."""
    s = torch.where(eligible, score, torch.full_like(score, -torch.inf))
    cut = torch.topk(s, k).values[-1]  # the k-th largest value (ties do not change it)
    above = eligible & (s > cut)
    ties = eligible & (s == cut)
    return above | (ties & (torch.cumsum(ties, 0) <= k - above.sum()))


def grad_select(
    delta: dict[str, np.ndarray] | dict[str, torch.Tensor],
    m_cur: Masks,
    rate: float,
    limit: float,
    selection: str = "most",
    rng: np.random.Generator | None = None,
) -> Masks:
    """GradSelect: the next masks given θ - θ_start per tensor (ties: lowest index first).
    The ranking runs on the device ``delta`` is on; counts come from the host masks."""
    out: Masks = {}
    for name, m in m_cur.items():
        flat = m.reshape(-1)
        k = growth_count(flat.size, int(flat.sum()), rate, limit)
        grown = flat.copy()
        if k > 0 and selection == "random":
            free = np.flatnonzero(~flat)
            grown[free[(rng or np.random.default_rng(0)).permutation(free.size)[:k]]] = True
        elif k > 0:
            d = delta[name]
            dev = torch.from_numpy(d) if isinstance(d, np.ndarray) else d
            score = dev.reshape(-1).abs()
            shared = torch.from_numpy(~flat).to(score.device)
            grown |= top_k_mask(score if selection == "most" else -score, shared, k).cpu().numpy()
        out[name] = grown.reshape(m.shape)
    return out


def local_alt(job: ClientJob, m_cur: Masks, epochs: int) -> TrainStats:
    """LocalAlt: per epoch a personal pass and a shared pass over the same batch order."""
    settings = dataclasses.replace(settings_of(job.cfg), epochs=1)
    x, y = job.tensors()
    personal, shared = job.to_device(m_cur), job.to_device({n: ~m for n, m in m_cur.items()})
    host = (m_cur.values(), [~m for m in m_cur.values()])  # which passes are empty, decided on the host
    passes = [masks for masks, ms in zip((personal, shared), host, strict=True) if any(bool(m.any()) for m in ms)]
    losses, steps, seconds = [], 0, 0.0
    for _ in range(epochs):
        order = job.gen.get_state()
        for masks in passes:
            job.gen.set_state(order)
            stats = local_fit(job.model, x, y, settings, job.gen, masks, None, augment=job.data.augment)
            losses.append(stats.loss)
            steps, seconds = steps + stats.steps, seconds + stats.seconds
    return TrainStats(float(np.mean(losses)) if losses else 0.0, int(x.shape[0]), steps, seconds)


class FedSelectClient(PersonalClient):
    trains_local_epochs = False  # local-alt-epochs passes of one epoch each (or local-steps)

    def chunk_memory(self) -> ClientMemory:
        return dataclasses.replace(super().chunk_memory(), mask_sets=2)  # LocalAlt's personal and shared gradient masks

    def local_update(self, job: ClientJob, m_cur: Masks) -> TrainStats:
        return local_alt(job, m_cur, self.params.local_alt_epochs)

    def next_mask(self, job: ClientJob, m_cur: Masks, start: dict[str, torch.Tensor]) -> Masks:
        if job.server_round % self.params.mask_update_every:
            return m_cur
        now = {n: p.detach() for n, p in job.model.named_parameters() if n in m_cur}
        delta = {n: now[n] - start[n] for n in m_cur}
        rng = np.random.default_rng([job.cfg.seed, job.server_round, job.pid])
        return grad_select(delta, m_cur, self.params.personal_rate, self.params.personal_limit, self.params.personal_selection, rng)


METHOD = Method("fedselect", PersonalServer, FedSelectClient, FedSelectParams)
