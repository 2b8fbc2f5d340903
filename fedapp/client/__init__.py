"""The client side: message handlers, per-process caches, the query handler and the config-error mod."""
