"""Partial downlink (``downlink = selected``): the server sends a node only the global tensors
that changed since the model it last sent that node, the node rebuilds the whole model from its
cache and checks it against the server's digest (digest.py, server.py, cache.py); traffic.py
counts what each message weighs on the wire."""
