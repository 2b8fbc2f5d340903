"""The metrics.jsonl names that methods write and the report reads, each defined once.

The method that writes a metric imports its name from here and so does report*.py; the names
live in this torch-free module, not in the method files, so `fedapp report` never loads torch.
"""

WARMUP = "warmup"  # FedPeWS, FedPeWS-Fixed: whether the round trained with personalised masks
CLIENT_ACTIVE_FRACTION = "client_active_fraction"  # tiered methods: each replying client's tier fraction p
ES_ROUND_CODE = "es_round_code"  # tiered methods: the first round with fewer active clients than K (early stopping)
