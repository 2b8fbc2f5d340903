"""FedPeWS warm-up rounds (``pews_train.WarmupLoop.run``) for many clients at once: the call the
loop parks (``WarmupCall``) and the batched kernel the engine trains such calls with.

Per client and minibatch, as the one-client loop and with its functions (``pews_steps.py``): a
score step, then a weight step under the mask drawn from the updated scores (or the same draw,
``shared``), with the optimizer's masked update. The losses' gradients are ``vmap``-ed over the
stacked weights, scores and masks. Every client's uniform draws come from its own generator in
the one-client order (minibatch permutations first, then per step the score draw and the weight
draw), so the masks are the same bits; they are all made before the step loop and moved to the
device once (``batched/upfront.py``). Clients with fewer steps idle through the chunk's last
steps (``plan.step_grid``). Models with buffers are left to the one-client loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from torch.func import grad, vmap

from fedapp.batched.fit import FitCall
from fedapp.batched.fit import why_not as fit_why_not
from fedapp.batched.optim import StackedOptimizer
from fedapp.batched.plan import client_batches, step_grid
from fedapp.batched.seam import Kernel, register
from fedapp.batched.train import weighted_ce
from fedapp.batched.upfront import warmup_draws
from fedapp.core.train import TrainStats
from fedapp.methods.pews_steps import Tensors, WarmupSpec, score_loss, weight_loss


class WarmupLoop(Protocol):
    """What the kernel reads of ``pews_train.WarmupLoop`` (typed here, so the two modules stay one-way)."""

    model: nn.Module  # at the client's start weights
    spec: WarmupSpec
    anchor: Tensors  # the start weights of the trainable parameters (proximal term)

    def run_here(
        self, x: torch.Tensor, y: torch.Tensor, scores: torch.Tensor, pews: dict[str, Any], gen: torch.Generator
    ) -> tuple[TrainStats, torch.Tensor]: ...


Outcome = tuple[TrainStats, torch.Tensor, Tensors]  # stats, final scores, trained parameters


@dataclass
class WarmupCall:
    """One client's warm-up round: its loop (model at its start weights, spec, anchor), data and draws."""

    loop: WarmupLoop
    x: torch.Tensor
    y: torch.Tensor
    scores: torch.Tensor
    pews: dict[str, Any]  # ref, weight, lr, shared
    gen: torch.Generator
    outcome: Outcome | None = None

    def run_here(self) -> tuple[TrainStats, torch.Tensor]:
        return self.loop.run_here(self.x, self.y, self.scores, self.pews, self.gen)

    @property
    def has_ref(self) -> bool:
        return self.pews["ref"] is not None and self.pews["weight"] > 0


def why_not(call: WarmupCall) -> str | None:
    model = call.loop.model
    reason = fit_why_not(FitCall(model, call.x, call.y, call.loop.spec.settings, call.gen, None, None, None))
    if reason is None and any(True for _ in model.buffers()):
        reason = "a FedPeWS warm-up of a model with buffers"
    return reason


def key(call: WarmupCall) -> Hashable:
    """What clients of one chunk must share (the first client's model runs them all)."""
    model, x = call.loop.model, call.x
    state = tuple((k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items())
    step = (call.has_ref, float(call.pews["weight"]), float(call.pews["lr"]), bool(call.pews["shared"]))
    return (type(model), state, call.loop.spec, step, str(x.device), tuple(x.shape[1:]), x.dtype, call.scores.dtype)


def step_grads(call: WarmupCall) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """vmap(grad) of one client's score loss and weight loss (``pews_steps``), for the chunk of ``call``."""
    spec, model = call.loop.spec, call.loop.model
    weight, has_ref = float(call.pews["weight"]), call.has_ref

    def scores_loss(
        s: torch.Tensor, u: torch.Tensor, tr: Tensors, fx: Tensors, r: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor
    ) -> Any:
        return score_loss(
            s, u, lambda m: weighted_ce(spec.forward(model, tr, fx, xb, m), yb, wb), r if has_ref else None, weight, spec.ste_identity
        )

    def weights_loss(
        tr: Tensors, fx: Tensors, mask: torch.Tensor, anc: Tensors, xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor
    ) -> Any:
        pm = spec.param_masks(mask)
        task = weighted_ce(spec.forward(model, tr, fx, xb, mask, pm), yb, wb)
        used = {n: m.detach() for n, m in pm.items() if n in tr}  # the step's parameter masks, for the optimizer
        return weight_loss(task, spec.mu, tr, anc, pm), (task.detach(), used)

    return vmap(grad(scores_loss, has_aux=True)), vmap(grad(weights_loss, has_aux=True))


class WarmupChunk:
    """Calls of one key, stacked on their device: weights, anchor, scores, references, the step grid,
    the clients' data and every uniform draw of the round."""

    def __init__(self, calls: Sequence[WarmupCall]):
        first = calls[0]
        spec, device = first.loop.spec, first.x.device
        names = [n for n, _ in spec.shapes]
        params = [dict(c.loop.model.named_parameters()) for c in calls]
        self.train = {n: torch.stack([p[n].detach() for p in params]) for n in names}
        self.fixed = {n: torch.stack([p[n].detach() for p in params]) for n in params[0] if n not in self.train}
        self.anchor = {n: torch.stack([c.loop.anchor[n] for c in calls]) for n in names} if spec.mu > 0 else {}
        self.scores = torch.stack([c.scores.detach() for c in calls])
        self.ref = torch.stack([c.pews["ref"] for c in calls]) if first.has_ref else torch.zeros_like(self.scores)
        self.lr, self.shared = float(first.pews["lr"]), bool(first.pews["shared"])
        plans = [client_batches(int(c.x.shape[0]), spec.settings, c.gen) for c in calls]
        self.grid = step_grid(plans, [int(c.x.shape[0]) for c in calls], self.scores.dtype, device)
        self.x, self.y = torch.cat([c.x for c in calls]), torch.cat([c.y for c in calls])
        self.opt = StackedOptimizer(spec.settings, self.train, {})
        self.uniforms = warmup_draws([c.gen for c in calls], plans, tuple(self.scores.shape[1:]), self.shared, self.scores.device)
        self.score_grads, self.weight_grads = step_grads(first)
        self.total = torch.zeros(len(calls), dtype=torch.float64, device=device)

    def step(self, t: int) -> None:
        """Step t for every client: the score step, then the weight step under the new mask; idle clients keep theirs."""
        grid = self.grid
        active, width = grid.active[t], grid.widths[t]
        rows, wb = grid.rows[t, :, :width], grid.weights[t, :, :width]
        xb, yb = self.x[rows], self.y[rows]
        g, drawn = self.score_grads(self.scores, self.uniforms[0][t], self.train, self.fixed, self.ref, xb, yb, wb)
        self.scores = torch.where(active.view(-1, 1), self.scores - self.lr * g, self.scores)
        mask = drawn if self.shared else (self.uniforms[1][t] < torch.sigmoid(self.scores)).to(self.scores.dtype)
        grads, (task, pm) = self.weight_grads(self.train, self.fixed, mask, self.anchor, xb, yb, wb)
        self.opt.masks, self.opt.float_masks = {n: m.bool() for n, m in pm.items()}, pm
        self.opt.step(self.train, grads, active, grid.all_active[t])
        self.total += torch.where(active, task.double(), 0.0)

    def outcomes(self, calls: Sequence[WarmupCall], seconds: float) -> list[Outcome]:
        losses = self.total.tolist()  # the chunk's one read from the device
        out = []
        for i, c in enumerate(calls):
            stats = TrainStats(losses[i] / self.grid.steps[i], int(c.x.shape[0]), self.grid.steps[i], seconds)
            out.append((stats, self.scores[i].clone(), {n: v[i] for n, v in self.train.items()}))
        return out


def train_warmups(calls: Sequence[WarmupCall]) -> list[Outcome]:
    """Each client's (stats, final scores, trained parameters) for calls of one ``key``."""
    start = time.perf_counter()
    chunk = WarmupChunk(calls)
    for t in range(chunk.grid.num_steps):
        chunk.step(t)
    return chunk.outcomes(calls, (time.perf_counter() - start) / len(calls))


def finish(call: WarmupCall, outcome: Outcome) -> tuple[TrainStats, torch.Tensor]:
    """The trained weights into the client's own model; what ``run_here`` returns."""
    stats, new_scores, trained = outcome
    with torch.no_grad():
        for n, p in call.loop.model.named_parameters():
            if n in trained:
                p.copy_(trained[n])
    call.loop.model.train()
    return stats, new_scores


register(WarmupCall, Kernel("FedPeWS warm-up chunk", why_not, key, train_warmups, finish))
