"""What one client of a method holds in a batched chunk beyond FedAvg's model, data and optimizer
state, as its method declares it (``ClientPolicy.chunk_memory``). ``client-batch = auto`` sizes
chunks by it (``fedapp.engine.client_batch_size``), so the engine names no method."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClientMemory:
    anchor: bool = False  # a proximal anchor: a copy of the weights in the lane, stacked in the kernel
    mask_sets: int = 0  # bool gradient masks per parameter the lane holds (the kernel stacks one set, with a float copy)
    warmup: bool = False  # sized for its warm-up chunks, the larger: score and weight passes, every step's neuron draws
