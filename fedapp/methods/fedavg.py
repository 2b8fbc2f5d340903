"""FedAvg: the all-ones-mask case of the masked core (base.py holds its halves)."""

from fedapp.methods.base import ClientPolicy, Method, ServerPolicy

METHOD = Method("fedavg", ServerPolicy, ClientPolicy)
