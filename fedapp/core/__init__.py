"""Core pieces both sides share: the typed run-config, masks, aggregation, training, the wire format, evaluation, device and logs."""
