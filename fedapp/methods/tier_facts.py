"""The node-config keys the tiered methods read from discovery (tiers.active_fraction): the query
handler forwards them to the server. Apart from tiers.py so that the handler imports no torch."""

TIER = "tier"  # index into run-config ``tiers``
ACTIVE_FRACTION = "active-fraction"  # the node's own p, wins over its tier
NODE_FACTS = (TIER, ACTIVE_FRACTION)
