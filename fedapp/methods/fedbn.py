"""FedBN (Li et al., ICLR 2021): FedAvg, but every BatchNorm layer stays local.

Each client keeps its own BatchNorm affine parameters (weight, bias) and running statistics;
the server averages every other parameter as FedAvg does and never sees a BatchNorm value.
On the personal-model machinery (personal.py) this is a fixed personal mask: the BatchNorm
parameters are personal, everything else is global, and buffers (the running statistics)
never leave a client there. Clients are evaluated with their own BatchNorm layers.
"""

from __future__ import annotations

import numpy as np
from torch import nn

from fedapp.methods.base import Method
from fedapp.methods.personal import Masks, PersonalClient, PersonalServer, eligible


def batchnorm_parameters(model: nn.Module) -> set[str]:
    """Names of the affine parameters of every BatchNorm layer (1d, 2d, 3d, torchvision's included)."""
    return {
        f"{prefix}.{name}" if prefix else name
        for prefix, mod in model.named_modules()
        if isinstance(mod, nn.modules.batchnorm._BatchNorm)
        for name, _ in mod.named_parameters(recurse=False)
    }


class FedBNClient(PersonalClient):
    def initial_mask(self, model: nn.Module) -> Masks:
        bn = batchnorm_parameters(model)
        return {n: np.full(s, n in bn) for n, s in eligible(model).items()}


METHOD = Method("fedbn", PersonalServer, FedBNClient)
