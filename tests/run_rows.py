"""metrics.jsonl rows without their wall-clock fields, for tests that compare two runs
that must agree on everything else (determinism, resume): fedapp.server.run_compare's."""

from fedapp.server.run_compare import WIRE, is_timing, outcome_rows

__all__ = ["WIRE", "is_timing", "outcome_rows"]
