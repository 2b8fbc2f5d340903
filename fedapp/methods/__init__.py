"""Federated methods: each a server policy + client policy on the masked core."""

from fedapp.methods.registry import get_method, known_keys, resolve

__all__ = ["get_method", "known_keys", "resolve"]
