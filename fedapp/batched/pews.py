"""FedPeWS warm-up rounds (``methods.pews_train.WarmupLoop.run``) for many clients at once.

Per client and minibatch, as the one-client loop: a score step (Procedure I: weights frozen,
a Bernoulli(sigmoid(s)) mask with the straight-through estimator, the diversity term), then a
weight step (Procedure II) under the mask drawn from the updated scores (or the same draw,
``shared``), with the optimizer's masked update and the masked proximal term. Every client's
uniform draws come from its own generator in the one-client order (minibatch permutations
first, then per step the score draw and the weight draw), so the masks are the same bits;
the loss and gradients are ``vmap``-ed over the stacked weights, scores and masks. Clients
with fewer steps idle through the chunk's last steps (``plan.step_grid``), drawing nothing.
All draws are made before the step loop and moved to the device once (``upfront.py``).

Models with buffers are left to the one-client loop (``WarmupLoop`` keeps none either).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from fedapp.batched.optim import StackedOptimizer
from fedapp.batched.plan import client_batches, step_grid
from fedapp.batched.upfront import warmup_draws
from fedapp.core.masks import torch_param_masks
from fedapp.core.train import TrainStats, masked_distance

Tensors = dict[str, torch.Tensor]


@dataclass
class WarmupWork:
    """One client's warm-up round: its loop (model, layout, settings, options), data and draws."""

    loop: Any  # methods.pews_train.WarmupLoop (its model holds the client's start weights)
    x: torch.Tensor
    y: torch.Tensor
    scores: torch.Tensor
    pews: dict[str, Any]  # ref, weight, lr, shared
    gen: torch.Generator


def warmup_key(w: WarmupWork) -> tuple[Any, ...]:
    """What clients of one chunk must share (the one template loop runs them all)."""
    loop = w.loop
    state = tuple((k, tuple(v.shape), v.dtype) for k, v in loop.model.state_dict().items())
    options = (loop.settings, loop.impl, loop.mu, loop.extent, loop.ste_identity, tuple(n for n, _ in loop.named))
    pews = (w.pews["ref"] is None, float(w.pews["weight"]), float(w.pews["lr"]), bool(w.pews["shared"]))
    return (type(loop.model), state, options, pews, str(w.x.device), tuple(w.x.shape[1:]), w.x.dtype, w.scores.dtype)


def train_warmups(works: Sequence[WarmupWork]) -> list[tuple[TrainStats, torch.Tensor, Tensors]]:
    """Each client's (stats, final scores, trained parameters) for works of one ``warmup_key``."""
    start = time.perf_counter()
    tmpl = works[0].loop
    settings, device = tmpl.settings, works[0].x.device
    names = [n for n, _ in tmpl.named]
    fixed_names = [n for n, _ in tmpl.model.named_parameters() if n not in set(names)]
    params = [dict(w.loop.model.named_parameters()) for w in works]
    train = {n: torch.stack([p[n].detach() for p in params]) for n in names}
    fixed = {n: torch.stack([p[n].detach() for p in params]) for n in fixed_names}
    anchor = {n: torch.stack([w.loop.anchor[n] for w in works]) for n in names} if tmpl.mu > 0 else {}
    scores = torch.stack([w.scores.detach() for w in works])
    has_ref = works[0].pews["ref"] is not None and works[0].pews["weight"] > 0
    ref = torch.stack([w.pews["ref"] for w in works]) if has_ref else torch.zeros_like(scores)
    weight, lr, shared = float(works[0].pews["weight"]), float(works[0].pews["lr"]), bool(works[0].pews["shared"])
    plans = [client_batches(int(w.x.shape[0]), settings, w.gen) for w in works]
    grid = step_grid(plans, [int(w.x.shape[0]) for w in works], scores.dtype, device)
    x, y = torch.cat([w.x for w in works]), torch.cat([w.y for w in works])
    opt = StackedOptimizer(settings, train, {})
    shapes, layout = tmpl.shapes, tmpl.layout
    widths = list(layout.widths)

    def param_masks(mask: torch.Tensor) -> Tensors:
        return torch_param_masks(layout, list(torch.split(mask, widths)), shapes, tmpl.extent)

    def forward(tr: Tensors, fx: Tensors, xb: torch.Tensor, mask: torch.Tensor, pm: Tensors | None) -> torch.Tensor:
        if tmpl.impl == "activation":
            from fedapp.methods.pews_train import input_masks

            with input_masks(tmpl.model, layout, list(torch.split(mask, widths))):
                return functional_call(tmpl.model, {**tr, **fx}, (xb,))  # type: ignore[no-any-return]
        pm = param_masks(mask) if pm is None else pm
        return functional_call(tmpl.model, {**{n: p * pm[n] if n in pm else p for n, p in tr.items()}, **fx}, (xb,))  # type: ignore[no-any-return]

    def ce(out: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor) -> torch.Tensor:
        return (F.cross_entropy(out, yb, reduction="none") * wb).sum() / wb.sum()

    def score_loss(
        s: torch.Tensor, u: torch.Tensor, tr: Tensors, fx: Tensors, r: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor
    ) -> Any:
        theta = torch.sigmoid(s)
        through = s if tmpl.ste_identity else theta
        m = (u < theta.detach()).to(theta.dtype) + through - through.detach()
        loss = ce(forward(tr, fx, xb, m, None), yb, wb)
        if has_ref:
            loss = loss + -weight * ((torch.sigmoid(s) - r) ** 2).sum()
        return loss, m.detach().round()

    def weight_loss(
        tr: Tensors, fx: Tensors, mask: torch.Tensor, anc: Tensors, xb: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor
    ) -> Any:
        pm = param_masks(mask)
        task = ce(forward(tr, fx, xb, mask, pm), yb, wb)
        used = {n: m.detach() for n, m in pm.items() if n in tr}  # the step's parameter masks, for the optimizer
        if tmpl.mu <= 0:
            return task, (task.detach(), used)
        return task + 0.5 * tmpl.mu * masked_distance(tr, anc, pm, task.dtype, task.device), (task.detach(), used)

    score_grads = vmap(grad(score_loss, has_aux=True))
    weight_grads = vmap(grad(weight_loss, has_aux=True))
    total = torch.zeros(len(works), dtype=torch.float64, device=device)
    uniforms = warmup_draws([w.gen for w in works], plans, tuple(scores.shape[1:]), shared, scores.device)
    for t in range(grid.num_steps):
        active, width = grid.active[t], grid.widths[t]
        rows, wb = grid.rows[t, :, :width], grid.weights[t, :, :width]
        xb, yb = x[rows], y[rows]
        u1, u2 = uniforms[0][t], uniforms[1][t]
        g, drawn = score_grads(scores, u1, train, fixed, ref, xb, yb, wb)
        new_scores = scores - lr * g
        scores = torch.where(active.view(-1, 1), new_scores, scores)
        mask = drawn if shared else (u2 < torch.sigmoid(scores)).to(scores.dtype)
        grads, (task, pm) = weight_grads(train, fixed, mask, anchor, xb, yb, wb)
        opt.masks, opt.float_masks = {n: m.bool() for n, m in pm.items()}, pm
        opt.step(train, grads, active, grid.all_active[t])
        total += torch.where(active, task.double(), 0.0)
    losses = total.tolist()
    seconds = (time.perf_counter() - start) / len(works)
    out = []
    for i, w in enumerate(works):
        stats = TrainStats(losses[i] / grid.steps[i], int(w.x.shape[0]), grid.steps[i], seconds)
        out.append((stats, scores[i].clone(), {n: v[i] for n, v in train.items()}))
    return out
