"""Partitions bound to their registered nodes, in a real deployment (SuperLink + SuperNodes over
TLS with node authentication, started with `fedapp deploy`), and no secret in what it leaves.

The operator registers key i for partition i (`fedapp deploy register 0=... 1=...`), and two
more keys the rogue devices hold: one registered for partition 2 (a device of a larger
federation) and one registered without a binding. Both rogues set ``partition-id=0`` and are
online before partition 0's own node, so they answer discovery first. Then the run folder and
every log of the deployment are searched for the ServerApp's ``--token`` (read from its
process) and for the private keys' PEM material."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from fedapp.deploy.keys import make_node_keys
from fedapp.server.results import read_config
from tests.deploy_harness import Federation, cmdline, descendants, rows
from tests.flwr_harness import shared_checkout
from tests.provenance_checks import check_recorded

pytestmark = pytest.mark.flwr

RUN = {
    "num-clients": 2, "dataset": "digits", "partition": "0,1,2,3,4|5,6,7,8,9", "local-steps": 4, "lr": 0.3,
    "min-replies": 2, "round-timeout": 120.0, "num-server-rounds": 2,
}  # fmt: skip
BOUND_ELSEWHERE, UNBOUND = 2, 3  # the rogues' node folders (node-2, node-3)


def serverapp_token(fed: Federation) -> str:
    """The ``--token`` the SuperLink gave the running ServerApp process."""
    assert fed.superlink is not None
    for pid in descendants(fed.superlink.pid):
        argv = cmdline(pid).split()
        if any(a.endswith("flwr-serverapp") for a in argv) and "--token" in argv:
            return argv[argv.index("--token") + 1]
    raise AssertionError("no flwr-serverapp process with --token under the SuperLink")


def pem_lines(path: Path) -> list[bytes]:
    """The base64 lines of a PEM/OpenSSH private key (what a leak would show of it)."""
    return [line for line in path.read_bytes().splitlines() if len(line) >= 16 and b"-----" not in line]


def test_a_registered_rogue_answering_discovery_first_gets_no_partition_and_leaves_no_secret(tmp_path: Path) -> None:
    fed = Federation(tmp_path, 2)
    try:
        fed.start_superlink()
        rogue = make_node_keys(2, tmp_path / "keys", prefix="rogue")
        outs = fed.register([f"0={fed.keys[0][1]}", f"1={fed.keys[1][1]}", f"2={rogue[0][1]}", str(rogue[1][1])])
        ids = [int(m.group(1)) for out in outs if (m := re.search(r"SuperNode (\d+) registered", out))]
        assert len(ids) == 4, outs
        fed.start_node(1)
        fed.start_node(BOUND_ELSEWHERE, rogue[0][0], partition=0)
        fed.start_node(UNBOUND, rogue[1][0], partition=0)
        fed.wait_for(lambda: fed.online() >= 3, 180, "node 1 and both rogues online")
        run_dir = tmp_path / "run"
        proc = fed.submit({**RUN, "run-dir": str(run_dir)}, "run-rogue")
        log = tmp_path / "run-rogue.log"
        fed.wait_for(lambda: log.read_text(errors="replace").count("kept out") >= 2 or proc.poll() is not None, 300, "the rogues' answers")
        token = serverapp_token(fed)  # the ServerApp is waiting for partition 0 (discovery)
        fed.start_node(0)  # partition 0's own node comes online last
        proc.wait(timeout=600)
        fed.runs.remove(proc)
    finally:
        fed.stop()
    out = rows(run_dir)
    assert [(r["round"], r["clients"], r["failures"]) for r in out] == [(1, 2, 0), (2, 2, 0)], log.read_text()[-3000:]
    assert sorted(out[0]["roster_refused"]) == sorted([
        f"node {ids[2]}: claims partition-id 0, but it is registered for partition 2",
        f"node {ids[3]}: claims partition-id 0, but its registration binds it to no partition (bindings are in force)",
    ])  # fmt: skip
    assert "roster_refused" not in out[1]  # kept out for the run: not asked again
    assert all(sorted(r["train_seconds"]) == ["0", "1"] for r in out)
    trained = {i: "Receiving: train message" in fed.log(f"node-{i}") for i in range(4)}
    assert trained == {0: True, 1: True, BOUND_ELSEWHERE: False, UNBOUND: False}  # partition 0 trained on its own node
    assert all("Receiving: query message" in fed.log(f"node-{i}") for i in (BOUND_ELSEWHERE, UNBOUND))

    # -- no secret in the run folder or in any log of the deployment -------------------------------
    keys = [tmp_path / "tls" / "server.key", tmp_path / "tls" / "ca.key", *(p for p in (tmp_path / "keys").iterdir() if p.suffix != ".pub")]
    material = [line for key in keys for line in pem_lines(key)]
    assert len(token) >= 16 and len(material) >= 3 * len(keys)
    scanned = [p for p in run_dir.rglob("*") if p.is_file()] + [*tmp_path.glob("*.log"), *tmp_path.glob("node-*/log")]
    assert len(scanned) >= 10, scanned
    for path in scanned:
        data = path.read_bytes()
        assert token.encode() not in data, f"the ServerApp's token is in {path}"
        assert b"PRIVATE KEY" not in data and not any(line in data for line in material), f"private-key material in {path}"
    provenance = json.loads((run_dir / "config.json").read_text())["provenance"]
    check_recorded(provenance, read_config(run_dir), shared_checkout())  # each node's versions and data digest, the commit
    command = shlex.split(provenance["command"])  # the user's `flwr run`, its overrides as TOML (no value has a space)
    assert command[:3] == ["flwr", "run", "--run-config"] and len(command) == 4, command
    assert tomllib.loads("\n".join(command[3].split(" "))) == {**RUN, "run-dir": str(run_dir)}
    print(f"\nrogue: refused {out[0]['roster_refused']}; scanned {len(scanned)} files for the token and {len(material)} key lines")
