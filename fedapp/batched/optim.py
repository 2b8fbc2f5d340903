"""torch.optim's SGD and Adam, step for step, over stacked per-client tensors (B, ...).

The arithmetic is torch's own single-tensor path (torch/optim/sgd.py, adam.py; the
foreach path on accelerators does the same operations list-wise), in the same order:
SGD  g += wd*p;  buf = g (first step) | buf = momentum*buf + g;  p -= lr*buf
Adam step += 1;  g += wd*p;  m.lerp_(g, 1-b1);  v = b2*v + (1-b2)*g*g;
     p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
Gradient masks are applied first (``fedapp.core.train.masked_step``) and masked entries are
written back after the step, so they keep their exact start values under momentum,
decay and Adam. ``keep`` (client b's step is real) leaves parameters and optimizer state
of idle clients untouched. No-op steps only ever trail a client's own steps, so every
real step of step index t is each client's (t+1)-th: Adam's bias corrections are the
same host scalars for all of them, as torch computes them.
"""

from __future__ import annotations

import torch

from fedapp.core.train import TrainSettings, needs_restore

Stacked = dict[str, torch.Tensor]


def _expand(flags: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return flags.view(-1, *([1] * (like.dim() - 1)))


class StackedOptimizer:
    """One optimizer per client, held as stacked state; ``step`` updates ``params`` in place."""

    def __init__(self, settings: TrainSettings, params: Stacked, masks: Stacked):
        if settings.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer {settings.optimizer!r} has no batched implementation")
        self.s, self.masks = settings, masks
        self.float_masks = {n: m.to(params[n].dtype) for n, m in masks.items()}
        self.t = 0
        self.state: dict[str, list[torch.Tensor]] = {}
        if settings.optimizer == "adam":
            self.state = {n: [torch.zeros_like(p), torch.zeros_like(p)] for n, p in params.items()}
        self.restore_masked = needs_restore(settings)

    def step(self, params: Stacked, grads: Stacked, active: torch.Tensor, all_active: bool) -> None:
        """Apply one step; ``active`` (B,) bool says whose step is real."""
        with torch.no_grad():
            for n, p in params.items():
                g = grads[n]
                if n in self.float_masks:
                    g = g.mul_(self.float_masks[n])
                keep = self._keep(n, p, active, all_active)
                old_p = p.clone() if keep is not None else p
                old_state = [] if all_active else [x.clone() for x in self.state.get(n, [])]
                if self.s.optimizer == "adam":
                    self._adam(n, p, g)
                else:
                    self._sgd(n, p, g)
                if keep is not None:
                    p.copy_(torch.where(keep, p, old_p))
                for cur, prev in zip(self.state.get(n, []) if old_state else [], old_state, strict=True):
                    cur.copy_(torch.where(_expand(active, cur), cur, prev))
        self.t += 1

    def _keep(self, n: str, p: torch.Tensor, active: torch.Tensor, all_active: bool) -> torch.Tensor | None:
        """Where the step's new values stand (None: everywhere): the client is active and,
        for a masked tensor, the entry is trainable. Plain SGD moves a masked entry by
        -lr*0, so the write-back is exact there too."""
        mask = self.masks.get(n)
        if all_active:
            return mask if mask is not None and self.restore_masked else None
        on = _expand(active, p)
        return on if mask is None else mask & on

    def _sgd(self, n: str, p: torch.Tensor, g: torch.Tensor) -> None:
        s = self.s
        if s.weight_decay != 0:
            g = g.add(p, alpha=s.weight_decay)
        if s.momentum != 0:
            if n not in self.state:  # step 0, which every client takes
                self.state[n] = [g.detach().clone()]
            else:
                self.state[n][0].mul_(s.momentum).add_(g, alpha=1)
            g = self.state[n][0]
        p.add_(g, alpha=-s.lr)

    def _adam(self, n: str, p: torch.Tensor, g: torch.Tensor) -> None:
        s, (beta1, beta2), eps = self.s, (0.9, 0.999), 1e-8
        exp_avg, exp_avg_sq = self.state[n]
        step = float(self.t + 1)
        if s.weight_decay != 0:
            g = g.add(p, alpha=s.weight_decay)
        exp_avg.lerp_(g, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = s.lr / bias_correction1
        denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(eps)
        p.addcdiv_(exp_avg, denom, value=-step_size)
