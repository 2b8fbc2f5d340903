"""Server side of the accounting: one round's seconds and joules for metrics.jsonl.

Definitions (docs/energy.md):

* ``client_train_s`` / ``client_eval_s``: the client's measured training window (its
  policy's ``train``: merge, local epochs, any validation pass) and evaluation window;
* ``client_wait_s`` = round wall time (server) − those windows: waiting for the server and
  the other clients, communicating, decoding/encoding messages;
* ``client_train_j`` / ``client_eval_j``: the client meter's joules over those windows;
  ``client_round_j``: joules since the client's previous reply (its whole round when it
  answers every round), over ``client_span_s`` seconds; ``client_wait_j`` = round − train − eval;
* sums ``train_s``, ``eval_s``, ``wait_s``, ``train_j``, ``eval_j`` over the clients of the
  round; ``round_j``: each distinct meter's increase since the round before (so a meter
  shared by several simulated clients counts once) over ``meter_s`` meter-seconds (so
  round_j / meter_s is the mean power per meter), ``other_j`` = round_j − train_j − eval_j.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("flwr")

Metrics = dict[int, dict[str, float]]


def _by_pid(src: Metrics, key: str) -> dict[int, float]:
    return {p: float(m[key]) for p, m in src.items() if key in m}


def _str(d: dict[int, float]) -> dict[str, float]:
    return {str(p): v for p, v in sorted(d.items())}


class Ledger:
    def __init__(self) -> None:
        self.meter_totals: dict[int, tuple[float, float]] = {}  # meter id -> its (joules, seconds) at the last round
        self._warned = False

    def round_row(self, seconds: float, t_start: float, t_end: float, train: Metrics, evals: Metrics) -> dict[str, Any]:
        pids = sorted(set(train) | set(evals))
        tr_s, ev_s = _by_pid(train, "phase-train-s"), _by_pid(evals, "phase-eval-s")
        wait = {p: max(0.0, seconds - tr_s.get(p, 0.0) - ev_s.get(p, 0.0)) for p in pids}
        row: dict[str, Any] = {
            "time_start": t_start, "time_end": t_end,
            "client_train_s": _str(tr_s), "client_eval_s": _str(ev_s), "client_wait_s": _str(wait),
            "train_s": sum(tr_s.values()), "eval_s": sum(ev_s.values()), "wait_s": sum(wait.values()),
            "client_windows": {str(p): self._windows(train.get(p, {}), evals.get(p, {})) for p in pids},
        }  # fmt: skip
        replies = [m for m in [*train.values(), *evals.values()] if "meter-id" in m]
        if replies:
            row.update(self._energy(pids, train, evals, replies))
        return row

    @staticmethod
    def _windows(tr: dict[str, float], ev: dict[str, float]) -> dict[str, list[float]]:
        out = {}
        for name, m in (("train", tr), ("eval", ev)):
            if f"phase-{name}-start" in m:
                out[name] = [m[f"phase-{name}-start"], m[f"phase-{name}-end"]]
        return out

    def _energy(self, pids: list[int], train: Metrics, evals: Metrics, replies: list[dict[str, float]]) -> dict[str, Any]:
        tr_j, ev_j = _by_pid(train, "phase-train-j"), _by_pid(evals, "phase-eval-j")
        span = {p: sum(float(m.get("meter-span-j", 0.0)) for m in (train.get(p, {}), evals.get(p, {}))) for p in pids}
        span_s = {p: sum(float(m.get("meter-span-s", 0.0)) for m in (train.get(p, {}), evals.get(p, {}))) for p in pids}
        wait_j = {p: span[p] - tr_j.get(p, 0.0) - ev_j.get(p, 0.0) for p in pids}
        latest: dict[int, tuple[float, float]] = {}
        hosts: dict[int, set[int]] = {}
        for m in replies:
            mid = int(m["meter-id"])
            latest[mid] = max(latest.get(mid, (0.0, 0.0)), (float(m["meter-total-j"]), float(m.get("meter-total-s", 0.0))))
            hosts.setdefault(int(m.get("meter-host", 0)), set()).add(mid)
        before = {mid: self.meter_totals.get(mid, (0.0, 0.0)) for mid in latest}
        round_j = sum(v[0] - before[mid][0] for mid, v in latest.items())
        meter_s = sum(v[1] - before[mid][1] for mid, v in latest.items())
        self.meter_totals.update(latest)
        shared = [len(ids) for ids in hosts.values() if len(ids) > 1]
        if shared and not self._warned:
            self._warned = True
            log.warning(
                "energy: %d client processes on one host sample the same meter, so round_j counts that host %d times; "
                "for energy studies run one client process per device (docs/energy.md)", max(shared), max(shared)
            )  # fmt: skip
        train_sum, eval_sum = sum(tr_j.values()), sum(ev_j.values())
        return {
            "client_train_j": _str(tr_j), "client_eval_j": _str(ev_j), "client_round_j": _str(span), "client_wait_j": _str(wait_j),
            "client_span_s": _str(span_s), "train_j": train_sum, "eval_j": eval_sum, "round_j": round_j,
            "other_j": round_j - train_sum - eval_sum, "meter_s": meter_s, "meters": len(latest),
        }  # fmt: skip
