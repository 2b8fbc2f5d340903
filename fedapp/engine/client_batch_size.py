"""``client-batch = auto``: how many clients the batched executor stacks in one chunk.

On CUDA the most clients whose chunk fits in ``AUTO_MEMORY_SHARE`` of the device's free
memory, at most ``AUTO_MAX``; elsewhere ``CPU_DEFAULT`` for models without convolutions and 1
with them (on a CPU vmapped convolutions are slower than one client's at a time), and there
only for rounds of at least ``CPU_MIN_CLIENTS`` clients (on a CPU 2 stacked MLP clients are
slower than 2 one after the other, 8 and more faster; docs/batched.md has the numbers).

What one client adds to a chunk (:func:`client_bytes`), as the lanes and the kernels
(``fedapp.batched.train`` and the methods' registered kernels) allocate it, with what its method
adds declared by the method (``ClientPolicy.chunk_memory``, a ``batched.memory.ClientMemory``):

- its lane: the client's own model, its train and test data as put on the device, its
  method state there (a proximal anchor; a warm-up's anchor; gradient-mask sets);
- the kernel: the stacked weights, the optimizer's state, the stacked proximal anchor and
  gradient masks, the chunk's concatenated copy of the training data and its step grid
  (every step of the round), and per step the gradients, the minibatch and the activations
  the vmapped forward saves for the backward pass with their gradients (``ACTIVATION_COPIES`` times the outputs of every module on one
  minibatch, views left out; a warm-up step's weight pass also holds its parameter masks
  and the masked weights, and its neuron draws are made before the loop); on CUDA also cuDNN's convolution workspace
  (``CONV_WORKSPACE_COPIES`` times the largest convolution's unfolded input).

The estimate is checked against the peak the kernel really allocates on the CPU
(bench/client_batch_memory.py, tests/test_client_batch_memory.py; docs/batched.md has the
CUDA figures). Free memory is read again every round (:meth:`AutoSize.pick`), counting the
blocks torch's caching allocator holds unused as free, on the device the clients train on
(a node-config ``device`` wins over the run-config's, as for the clients themselves).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedapp.batched.memory import ClientMemory
from fedapp.core.masks import neuron_layout
from fedapp.core.train import TrainSettings, needs_restore

CPU_DEFAULT = 8
CPU_MIN_CLIENTS = 8
AUTO_MAX = 256
AUTO_MEMORY_SHARE = 0.5
ACTIVATION_COPIES = 2  # each module's output, saved for the backward pass, and its gradient
LABEL_BYTES = 8  # int64 class labels
CONV_WORKSPACE_COPIES = 2  # cuDNN's workspace per client, in unfolded inputs of the largest convolution (measured, H200)


@dataclass(frozen=True)
class AutoSize:
    """``auto`` for one run and device: the CPU's fixed pick, or on CUDA the bytes one client
    adds to a chunk, set against the device's free memory each time :meth:`pick` is called."""

    device: torch.device
    cpu_pick: tuple[int, int]
    per_client: int = 0

    def pick(self) -> tuple[int, int]:
        """(clients per chunk, fewest train messages of a round that is batched)."""
        if self.device.type != "cuda":
            return self.cpu_pick
        # read now: what earlier rounds' lanes and the data cache hold is not free; torch's cached unused blocks are
        free, _ = torch.cuda.mem_get_info(self.device)
        free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return max(1, min(AUTO_MAX, math.floor(AUTO_MEMORY_SHARE * free / self.per_client))), 1


def auto_size(raw: Mapping[str, Any], node_config: Mapping[str, Any] | None = None) -> AutoSize:
    """``auto`` for run-config ``raw`` on the device its clients train on: ``node_config``'s
    ``device`` where it names one, else the run-config's."""
    from fedapp.client.cache import resolve_once
    from fedapp.core.device import node_device
    from fedapp.data import client_data, dataset_for
    from fedapp.models import build_model

    cfg, method, params = resolve_once(raw)
    device = node_device(cfg, node_config or {})
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes)
    convolutions = any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
    cpu_pick = (1 if convolutions else CPU_DEFAULT), CPU_MIN_CLIENTS
    if device.type != "cuda":
        return AutoSize(device, cpu_pick)
    train = max(2 * int(ds.y_train.shape[0]) // max(cfg.num_clients, 1), cfg.batch_size)  # twice a mean client's samples
    test = 2 * int(client_data(cfg, 0).y_test.shape[0])  # a client's own test split (personalised methods), twice
    return AutoSize(device, cpu_pick, chunk_bytes(cfg, 1, train, test, method.client(cfg, params).chunk_memory(), model, cuda=True))


def auto_client_batch(raw: Mapping[str, Any], node_config: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """(clients per chunk, fewest train messages of a round that is batched) for ``raw``, now."""
    return auto_size(raw, node_config).pick()


def chunk_bytes(
    cfg: Any, k: int, samples: int, test_samples: int, memory: ClientMemory, model: nn.Module | None = None, cuda: bool = False
) -> int:
    """Device bytes of a chunk of ``k`` clients of run-config ``cfg`` with ``samples`` training
    and ``test_samples`` test samples each, whose method adds ``memory`` (``cuda``: on a CUDA device)."""
    from fedapp.data import dataset_for
    from fedapp.models import build_model

    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes) if model is None else model
    slots = optimizer_slots(cfg)
    steps = cfg.local_steps if cfg.local_steps > 0 else cfg.local_epochs * math.ceil(samples / cfg.batch_size)
    args = (samples, slots, memory.anchor, test_samples, memory.warmup, memory.mask_sets, steps, cuda)
    return k * client_bytes(model, ds.in_shape, cfg.batch_size, *args)


def optimizer_slots(cfg: Any) -> int:
    settings = TrainSettings(1, 0, cfg.batch_size, cfg.lr, cfg.optimizer, cfg.momentum, cfg.weight_decay)
    return 2 if settings.optimizer == "adam" else int(settings.momentum > 0) + int(needs_restore(settings))


def forward_bytes(model: nn.Module, in_shape: tuple[int, ...], batch_size: int) -> tuple[int, int]:
    """On one minibatch of ``batch_size``: bytes of the outputs of every leaf module, views of
    the module's input (Flatten, in-place ReLU) left out (they allocate nothing); and of the
    largest convolution's unfolded input (in channels per group x kernel x output positions)."""
    outputs = unfolded = 0

    def count(m: nn.Module, inputs: Any, out: Any) -> None:
        nonlocal outputs, unfolded
        shared = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        if isinstance(out, torch.Tensor) and out.untyped_storage().data_ptr() not in shared:
            outputs += out.numel() * out.element_size()
        if isinstance(m, nn.modules.conv._ConvNd) and isinstance(out, torch.Tensor):
            per_position = m.in_channels // m.groups * math.prod(m.kernel_size)
            unfolded = max(unfolded, per_position * math.prod(out.shape[2:]) * out.shape[0] * out.element_size())

    handles = [m.register_forward_hook(count) for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model(torch.zeros((batch_size, *in_shape)))
    finally:
        for h in handles:
            h.remove()
    return outputs, unfolded


def hidden_neurons(model: nn.Module) -> int:
    """The hidden neurons a neuron mask covers (0 for a model with none)."""
    try:
        return neuron_layout(model).total
    except ValueError:
        return 0


def client_bytes(
    model: nn.Module,
    in_shape: tuple[int, ...],
    batch_size: int,
    samples: int,
    slots: int,
    prox: bool,
    test_samples: int = 0,
    warmup: bool = False,
    masks: int = 0,
    steps: int = 0,
    cuda: bool = False,
) -> int:
    """Device bytes one client adds to a chunk (the module docstring lists them); ``steps``:
    its minibatch steps in the round (0: one epoch); ``cuda``: with cuDNN's convolution workspace."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    row = math.prod(in_shape) * 4 + LABEL_BYTES
    elements = sum(p.numel() for p in model.parameters())
    lane = params + buffers + (samples + test_samples) * row + params * int(prox or warmup) + elements * masks
    steps = steps or math.ceil(samples / batch_size)
    grid = steps * batch_size * (8 + 4)  # row indices (int64) and weights per minibatch entry
    stacked = params + buffers + params * (slots + int(prox)) + samples * row + grid
    if masks:  # the kernel's stacked gradient masks (bool) and the optimizer's float copy
        stacked += elements * (1 + 4)
    outputs, unfolded = forward_bytes(model, in_shape, batch_size)
    step = params + ACTIVATION_COPIES * outputs + batch_size * row + CONV_WORKSPACE_COPIES * unfolded * int(cuda)
    if warmup:  # its score pass and weight pass run one after the other; the weight pass also holds
        step += 2 * params  # the step's parameter masks and the masked weights
        stacked += 2 * steps * hidden_neurons(model) * 4  # every step's two uniforms, drawn before the loop (float32)
    return lane + stacked + step
