"""Real deployment helpers: TLS material, SuperNode keys, SuperLink/SuperNode command lines.

`fedapp deploy ...` (see docs/deploy.md) wraps these; tests/deploy_harness.py uses the same
functions to start real Flower processes, so the documented path is the tested path.
"""


class DeployError(ValueError):
    """A deployment option is missing or inconsistent (the message names it and what is allowed)."""
