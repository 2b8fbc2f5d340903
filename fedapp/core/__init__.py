"""Pieces every side uses: the typed run-config, masks, aggregation, training, wire format, evaluation, client state store."""
