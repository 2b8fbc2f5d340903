"""Deployment across network namespaces: the SuperLink and each SuperNode on a separate
"host" (own namespace, own address, joined by its own veth link). One node's link is cut in
round 2 and restored after it: the run carries on without it and the node rejoins."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy_harness import Federation, rows
from tests.netns import Netns, unavailable
from tests.test_deploy import RUN, dense_bytes, wait_round

pytestmark = [pytest.mark.flwr, pytest.mark.slow]

CUT = 2


@pytest.mark.skipif((reason := unavailable()) is not None, reason=f"network namespaces unavailable: {reason}")
def test_link_cut_mid_round_is_survived_and_the_node_rejoins(tmp_path: Path) -> None:
    netns = Netns(3).create()
    fed = Federation(tmp_path, 3, netns=netns)
    try:
        fed.start()
        run_dir = tmp_path / "run"
        proc = fed.submit({**RUN, "num-server-rounds": 4, "run-dir": str(run_dir)}, "run-netns")
        wait_round(run_dir, 1, proc)
        before = [netns.received(i) for i in range(3)]
        netns.cut(CUT)  # round 2 is in flight
        wait_round(run_dir, 2, proc)
        netns.restore(CUT)
        proc.wait(timeout=900)
        fed.runs.remove(proc)
        received = [netns.received(i) - before[i] for i in range(3)]
        out = rows(run_dir)
    finally:
        fed.stop()
        netns.delete()
    assert [r["round"] for r in out] == [1, 2, 3, 4]
    assert out[0]["clients"] == 3
    assert (out[1]["clients"], out[1]["failed_pids"]) == (2, [CUT]) and out[1]["failure_reasons"]
    assert any(str(CUT) in r["train_seconds"] for r in out[2:]), [r["failed_pids"] for r in out]  # rejoined
    # rounds 2-4 uploads crossed each node's own link: the SuperLink side received at least them
    per_client = dense_bytes(run_dir)
    for i in range(3):
        uploads = sum(per_client for r in out[1:] if str(i) in r["train_seconds"])
        assert received[i] >= uploads, (i, received[i], uploads)
    summary = [(r["round"], r["clients"], r["failed_pids"], round(r["seconds"], 1)) for r in out]
    print(f"\nnetns: bytes received on the SuperLink side of each link {received}; (round, clients, failed, s) {summary}")
