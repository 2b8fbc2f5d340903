"""Federated methods: each a server policy + client policy on the masked core."""

from fedapp.methods.registry import Method, get_method, known_keys, resolve

__all__ = ["Method", "get_method", "known_keys", "resolve"]
