"""FedAvg: the all-ones-mask case of the masked core (base.py holds its halves)."""

from fedapp.methods.base import ClientPolicy, ServerPolicy
from fedapp.methods.registry import Method

METHOD = Method("fedavg", ServerPolicy, ClientPolicy)
