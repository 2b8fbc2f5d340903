"""``local_train`` for many clients at once: one ``vmap(grad(...))`` per minibatch step
over stacked per-client weights, buffers, masks and minibatches.

Per client this is ``fedapp.core.train.local_train``: the minibatches its generator draws,
mean cross-entropy over the minibatch's real samples (plus the proximal term, optionally
masked), torch.optim's SGD/Adam update (``optim.py``), gradient masks with an exact zero
update for masked entries, parameters with ``requires_grad=False`` left out (the model's
flags, shared by the batch; a per-client freeze is an all-zero gradient mask, which is
exact too). BatchNorm in train mode is exact per client (stacked running statistics),
because such clients are only batched with clients of the same minibatch sizes.
Statistics are read from the device once per chunk, never per step; augmentation draws
are made for the whole chunk before the step loop (``upfront.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedapp.batched.optim import Stacked, StackedOptimizer
from fedapp.batched.plan import StepGrid, chunks, client_batches, step_grid
from fedapp.batched.upfront import augment_draws, check_augments
from fedapp.core.train import Augment, TrainSettings, TrainStats, proximal_loss

Tensors = dict[str, torch.Tensor]
Forward = Callable[[nn.Module, Tensors, Tensors, torch.Tensor, Tensors], torch.Tensor]  # (model, params, buffers, xb, inputs) -> out


@dataclass
class ClientWork:
    """One client's local run, as ``local_train`` would take it."""

    x: torch.Tensor
    y: torch.Tensor
    gen: torch.Generator
    state: Tensors | None = None  # start parameters and buffers (None: the model's own)
    grad_masks: Tensors | None = None  # bool, True = may change (train.local_train's grad_masks)
    prox_masks: Tensors | None = None  # masks of the proximal term (None: the whole difference)
    augment: Augment | None = None
    inputs: Tensors | None = None  # per-client tensors a kernel's ``forward`` reads (e.g. activation masks)


@dataclass
class ClientOutcome:
    state: Tensors  # trained parameters and buffers (views into the chunk's stacked tensors, on the device)
    stats: TrainStats  # seconds: the chunk's wall time shared equally among its clients


def unbatchable(model: nn.Module) -> str | None:
    """Why ``model`` cannot be trained batched (None: it can)."""
    for name, mod in model.named_modules():
        if isinstance(mod, nn.modules.dropout._DropoutNd) and mod.p > 0:
            return f"{name} ({type(mod).__name__}) draws its dropout from the global RNG, which a batch cannot replay per client"
        own = [b for b, _ in mod.named_buffers(recurse=False)]
        if own and not isinstance(mod, nn.modules.batchnorm._BatchNorm):
            return f"{name} ({type(mod).__name__}) keeps buffers {own} that the batched trainer does not know how to stack"
    if not any(p.requires_grad for p in model.parameters()):
        return "the model has no trainable parameter"
    return None


def has_batchnorm(model: nn.Module) -> bool:
    """Whether the forward pass in train mode couples a minibatch's rows (padding would show)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def train_clients(
    model: nn.Module,
    works: Sequence[ClientWork],
    settings: TrainSettings,
    device: torch.device | str,
    client_batch: int | None = None,
    prox_mu: float = 0.0,
    forward: Forward | None = None,
) -> list[ClientOutcome]:
    """Train every client of ``works`` from its start state, ``client_batch`` at a time
    (None: as few chunks as the model allows); outcomes in the order of ``works``.

    ``model`` gives the structure, the trainable set (``requires_grad``) and the default
    start state; its own tensors are not changed (it is put in train mode). ``forward``: the
    model's forward pass for one client, given its ``ClientWork.inputs`` (default: ``plain_forward``)."""
    reason = unbatchable(model)
    if reason is not None:
        raise ValueError(f"cannot train this model batched: {reason}")
    check_augments([w.augment for w in works])
    device = torch.device(device)
    plans = [client_batches(int(w.x.shape[0]), settings, w.gen) for w in works]
    out: list[ClientOutcome | None] = [None] * len(works)
    for chunk in chunks(plans, client_batch or max(len(works), 1), exact_sizes=has_batchnorm(model)):
        done = _train_chunk(
            model, [works[i] for i in chunk], [plans[i] for i in chunk], settings, device, prox_mu, forward or plain_forward
        )
        for i, outcome in zip(chunk, done, strict=True):
            out[i] = outcome
    return [o for o in out if o is not None]


def _stack(values: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    return torch.stack([v.detach().to(device) for v in values])


def _stack_masks(works: Sequence[ClientWork], field: str, params: Stacked, device: torch.device) -> Stacked:
    """Bool masks per parameter for every client (all-True for a client without one)."""
    out: Stacked = {}
    for n, p in params.items():
        given = [(getattr(w, field) or {}).get(n) for w in works]
        if any(m is not None for m in given):
            ones = torch.ones(p.shape[1:], dtype=torch.bool, device=device)
            out[n] = _stack([ones if m is None else m.to(torch.bool) for m in given], device)
    return out


def plain_forward(model: nn.Module, params: Tensors, buffers: Tensors, xb: torch.Tensor, inputs: Tensors) -> torch.Tensor:
    """The model's own forward pass with one client's parameters and buffers."""
    return functional_call(model, (params, buffers), (xb,))  # type: ignore[no-any-return]


def weighted_ce(out: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over a padded minibatch's real rows (padding rows weigh 0)."""
    return (F.cross_entropy(out, yb, reduction="none") * wb).sum() / wb.sum()


def make_step_grads(model: nn.Module, prox_mu: float, forward: Forward = plain_forward) -> Callable[..., tuple[Stacked, torch.Tensor]]:
    """vmap(grad) of one client's minibatch loss: weighted mean cross-entropy over real
    rows, plus (mu/2) * ||M * (x - x_start)||^2 over the trainable tensors."""

    def loss(
        train: Tensors,
        fixed: Tensors,
        buffers: Tensors,
        anchor: Tensors,
        pmasks: Tensors,
        inputs: Tensors,
        xb: torch.Tensor,
        yb: torch.Tensor,
        wb: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        task = weighted_ce(forward(model, {**train, **fixed}, buffers, xb, inputs), yb, wb)
        if prox_mu <= 0:
            return task, task.detach()
        return task + proximal_loss(prox_mu, train, anchor, pmasks, task.dtype, task.device), task.detach()

    return vmap(grad(loss, has_aux=True))  # type: ignore[no-any-return]


class ChunkData:
    """The chunk's data on the device, concatenated, its augmentation draws (made before the
    step loop, ``upfront.py``), and each step's minibatches."""

    def __init__(self, works: Sequence[ClientWork], plans: Sequence[Sequence[torch.Tensor]], grid: StepGrid, device: torch.device):
        self.grid = grid
        self.x = torch.cat([w.x for w in works]).to(device)
        self.y = torch.cat([w.y for w in works]).to(device)
        augments = [w.augment for w in works]
        self.augment = augment_draws(augments, [w.gen for w in works], plans, device) if any(a is not None for a in augments) else None

    def step(self, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows = self.grid.rows[t, :, : self.grid.widths[t]]
        xb = self.x[rows] if self.augment is None else self.augment.apply(t, self.x[rows])
        return xb, self.y[rows], self.grid.weights[t, :, : self.grid.widths[t]]


def _train_chunk(
    model: nn.Module,
    works: Sequence[ClientWork],
    plans: Sequence[Sequence[torch.Tensor]],
    settings: TrainSettings,
    device: torch.device,
    prox_mu: float,
    forward: Forward,
) -> list[ClientOutcome]:
    start = time.perf_counter()
    model.train()
    base = {k: v.detach() for k, v in model.state_dict().items()}
    states = [w.state if w.state is not None else base for w in works]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    train = {n: _stack([s[n] for s in states], device) for n, _ in model.named_parameters() if n in trainable}
    fixed = {n: _stack([s[n] for s in states], device) for n, _ in model.named_parameters() if n not in trainable}
    buffers = {n: _stack([s[n] for s in states], device) for n, _ in model.named_buffers()}
    anchor = {n: p.clone() for n, p in train.items()} if prox_mu > 0 else {}
    pmasks = {n: m.to(train[n].dtype) for n, m in _stack_masks(works, "prox_masks", train, device).items()} if prox_mu > 0 else {}
    opt = StackedOptimizer(settings, train, _stack_masks(works, "grad_masks", train, device))
    inputs = {n: _stack([(w.inputs or {})[n] for w in works], device) for n in works[0].inputs or {}}
    dtype = next(iter(train.values())).dtype
    grid = step_grid(plans, [int(w.x.shape[0]) for w in works], dtype, device)
    if grid.padded and has_batchnorm(model):
        raise ValueError("clients with different minibatch sizes cannot share a BatchNorm chunk (padding changes batch statistics)")
    data = ChunkData(works, plans, grid, device)
    step_grads = make_step_grads(model, prox_mu, forward)
    total = torch.zeros(len(works), dtype=torch.float64, device=device)
    for t in range(grid.num_steps):
        xb, yb, wb = data.step(t)
        active = grid.active[t]
        before = {n: b.clone() for n, b in buffers.items()} if buffers and not grid.all_active[t] else {}
        grads, task = step_grads(train, fixed, buffers, anchor, pmasks, inputs, xb, yb, wb)
        for n, b in before.items():
            buffers[n].copy_(torch.where(active.view(-1, *([1] * (b.dim() - 1))), buffers[n], b))
        opt.step(train, grads, active, grid.all_active[t])
        total += torch.where(active, task.double(), 0.0)
    losses = total.tolist()  # the chunk's one read from the device
    seconds = (time.perf_counter() - start) / len(works)
    outcomes = []
    for i, w in enumerate(works):
        state = {n: v[i] for group in (train, fixed, buffers) for n, v in group.items()}
        state = {k: state[k] for k in base}  # the model's state_dict order
        stats = TrainStats(losses[i] / grid.steps[i], int(w.x.shape[0]), grid.steps[i], seconds)
        outcomes.append(ClientOutcome(state, stats))
    return outcomes
