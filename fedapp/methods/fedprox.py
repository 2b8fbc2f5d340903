"""FedProx: FedAvg plus the proximal term (mu/2)||x - x_global||^2 in local training.

The client half asks ``fedapp.methods.proximal.uses_prox`` (true for method=fedprox) and adds the term
through the training loop's extra-loss hook; the server half is FedAvg's.
"""

from fedapp.methods.base import ClientPolicy, Method, ServerPolicy

METHOD = Method("fedprox", ServerPolicy, ClientPolicy)
