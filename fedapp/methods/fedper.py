"""FedPer (Arivazhagan et al., 2019): FedAvg on the body, a personal classifier head.

The head is the model's last layer group (masks.layer_groups: the final Linear, or
torchvision ResNet's ``fc``). Body and head train together for ``local-epochs``;
only the body is uploaded and averaged (personal.py).
"""

from __future__ import annotations

import numpy as np
from torch import nn

from fedapp.core.masks import layer_groups
from fedapp.methods.base import Method
from fedapp.methods.personal import Masks, PersonalClient, PersonalServer, eligible


class FedPerClient(PersonalClient):
    def initial_mask(self, model: nn.Module) -> Masks:
        head = layer_groups(model)[-1].params
        return {n: np.full(s, n in head) for n, s in eligible(model).items()}


METHOD = Method("fedper", PersonalServer, FedPerClient)
