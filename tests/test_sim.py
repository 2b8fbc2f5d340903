"""`fedapp sim` (the `flwr run` wrapper) and per-checkout SuperLinks: two checkouts simulate
at once and keep their results apart; a federation smaller than num-clients fails at
discovery with exit 1 and one line; a bad value exits 2 with one line before anything starts;
scripts/flwr-env.sh derives the same FLWR_HOME and ports as fedapp.sim.flower_home."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedapp.client.config_errors import config_error_reply
from fedapp.client.node_query import handle_query
from fedapp.core.config import ConfigError
from fedapp.data import dataset_for
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.registry import resolve
from fedapp.models import initial_model
from fedapp.server import rundir
from fedapp.server.loop import serve
from fedapp.sim.flower_home import checkout_env, ports, superlink_pids
from fedapp.sim.run_local import full_config
from tests.flwr_harness import copy_checkout, fedapp_sim, shared_checkout, toml_value
from tests.provenance_checks import check_recorded
from tests.test_fedpews_run import BASE as PEWS
from tests.test_fedpews_run import dense_upload

FEDERATION = ["--federation-config", "num-supernodes=2 client-resources-num-cpus=1"]


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def overrides(config: dict[str, object]) -> str:
    return " ".join(f"{k}={toml_value(v)}" for k, v in config.items())


def untrained_accuracy(config: dict[str, object]) -> float:
    """Global test accuracy of w0, the model a run that learns nothing would end with (plain forward)."""
    cfg = resolve(full_config(config))[0]
    ds, model = dataset_for(cfg), initial_model(cfg).eval()
    x = torch.from_numpy(ds.x_test)
    with torch.no_grad():
        return float(np.mean(model(ds.norm.tensor(x) if ds.norm else x).argmax(1).numpy() == ds.y_test))


def check_fedavg(run_dir: Path, config: dict[str, object]) -> None:
    """`flwr run` end to end, FedAvg: three rows with the full schema, meters, config, model;
    the last round's accuracy 0.1 above w0's (measured in-process: 0.256 against 0.113)."""
    out = rows(run_dir)
    assert [r["round"] for r in out] == [1, 2, 3]
    for r in out:
        assert r["clients"] == 2 and r["failures"] == 0 and r["coverage"] == 1.0, r["failure_reasons"]
        assert r["bytes_up"] > 0 and r["bytes_down"] > 0 and r["seconds"] > 0
        assert set(r) >= {"round", "accuracy", "loss", "clients", "failures", "bytes_up", "bytes_down", "coverage", "seconds"}
        assert set(r["client_train_s"]) == {"0", "1"} and all(w >= 0 for w in r["client_wait_s"].values())  # energy ledger
    assert out[-1]["accuracy"] > untrained_accuracy(config) + 0.1
    assert set(json.loads((run_dir / "meters.json").read_text())) == {"0", "1"}
    assert json.loads((run_dir / "config.json").read_text())["num-server-rounds"] == 3
    assert (run_dir / "model.npz").exists()


def check_fedpews(run_dir: Path) -> None:
    """FedPeWS under Ray: masked warmup uploads (W = round(0.5 * 3) = 2), then dense."""
    out = rows(run_dir)
    assert [r["round"] for r in out] == [1, 2, 3]
    assert [r["warmup"] for r in out] == [True, True, False]
    for r in out:
        assert r["clients"] == 2 and r["failures"] == 0, r["failure_reasons"]
    for r in out[:2]:
        assert 0 < r["mask_density"] < 1 and 0 <= r["mask_overlap"] <= 1
        assert 0 < r["bytes_up"] < 2 * dense_upload() and r["coverage"] < 1.0
    assert out[2]["bytes_up"] == 2 * dense_upload() and out[2]["coverage"] == 1.0
    assert "mask_density" not in out[2]


@pytest.mark.flwr
def test_two_checkouts_simulate_at_once_and_keep_their_results_apart(tmp_path: Path) -> None:
    """The same relative run-dir in two checkouts, two `fedapp sim` at the same time: each run
    lands in its own checkout, through its own SuperLink (own FLWR_HOME and ports)."""
    a, b = shared_checkout(), copy_checkout(tmp_path / "second")
    slow = {"discovery-timeout": 900.0}  # two Ray clusters start at once on a shared machine
    fedavg = {"num-server-rounds": 3, "num-clients": 2, "partition": "0,2,4,6,8|1,3,5,7,9", "run-dir": "runs/same", **slow}
    pews = {**PEWS, "method": "fedpews", "diversity-weight": 1.0, "run-dir": "runs/same", **slow}
    procs = [fedapp_sim(a, [overrides(fedavg), *FEDERATION]), fedapp_sim(b, [overrides(pews), *FEDERATION])]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:] + err[-3000:]
    assert outs[0][0].strip().endswith(f"results in {a / 'runs' / 'same'}")
    check_fedavg(a / "runs" / "same", fedavg)
    check_fedpews(b / "runs" / "same")
    for checkout, method in ((a, "fedavg"), (b, "fedpews")):
        config = json.loads((checkout / "runs" / "same" / "config.json").read_text())
        assert config["method"] == method and config["run-dir"] == str(checkout / "runs" / "same")
        assert config["provenance"]["engine"] == "flwr run" and config["provenance"]["fab-hash"]
        check_recorded(config["provenance"], {k: v for k, v in config.items() if k != "provenance"}, checkout)  # from the FAB
    homes = [checkout_env(c)["FLWR_HOME"] for c in (a, b)]
    assert ports(a) != ports(b) and homes[0] != homes[1]
    running = [superlink_pids(h, ports(c)[0]) for h, c in zip(homes, (a, b), strict=True)]
    assert all(len(p) == 1 for p in running) and running[0] != running[1]  # one SuperLink each, still up for reuse


@pytest.mark.flwr
def test_a_federation_smaller_than_num_clients_fails_at_discovery_with_one_line(tmp_path: Path) -> None:
    """num-clients = 3 on 2 simulated SuperNodes: the nodes' num-partitions (2) contradicts it at
    their first answer, long before discovery-timeout (600 s here); exit 1 with the reason."""
    checkout = shared_checkout()
    run_dir = checkout / "runs" / "mismatch"
    config = {"num-clients": 3, "num-server-rounds": 2, "discovery-timeout": 600.0, "run-dir": "runs/mismatch"}
    started = time.monotonic()
    proc = fedapp_sim(checkout, [overrides(config), *FEDERATION])
    out, err = proc.communicate(timeout=900)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    reason = err.strip().splitlines()[-1]
    assert reason.startswith("fedapp: error: run-config key 'num-clients' = 3, but node ") and "reports num-partitions = 2" in reason
    assert "Traceback" not in out  # the ServerApp named it in one line; Flower's traceback of it is left out
    assert sorted(p.name for p in run_dir.iterdir()) == [rundir.FAILURE]
    print(f"\nmismatched num-clients: fedapp sim exited {proc.returncode} after {elapsed:.1f}s")


def test_a_bad_value_exits_2_with_one_line_before_anything_starts(tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path / "fresh")
    proc = fedapp_sim(checkout, ["lr=-0.1"])
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2 and out == ""
    assert err.strip().splitlines() == ["fedapp: error: run-config key 'lr' = -0.1 is not allowed: expected a number in (0, 100]"]
    assert not Path(checkout_env(checkout)["FLWR_HOME"]).exists() and not superlink_pids(checkout_env(checkout)["FLWR_HOME"])


def test_flwr_env_sh_and_simenv_agree(tmp_path: Path) -> None:
    for checkout in (shared_checkout(), copy_checkout(tmp_path / "other")):
        names = ["FEDAPP_CHECKOUT", "FLWR_HOME", "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT", "FLWR_LOCAL_CONTROL_API_PORT", "RAY_ADDRESS"]
        script = f"cd / && source {checkout}/scripts/flwr-env.sh && " + " && ".join(f'echo "${n}"' for n in names)
        got = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
        want = checkout_env(checkout)
        assert got.stdout.split("\n")[:5] == [want[n] for n in names]
        http, control = ports(checkout)
        assert 20000 <= http < 32000 and control == http + 1 and want["FLWR_HOME"] == str(checkout.resolve() / "runs" / ".flwr")


def test_simulations_start_their_own_ray_unless_told_to_join_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's simulation calls ray.init() without an address, which would join whatever cluster
    /tmp/ray/ray_current_cluster names (a `ray start` left on the machine, maybe unreachable)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert checkout_env(shared_checkout())["RAY_ADDRESS"] == "local"
    monkeypatch.setenv("RAY_ADDRESS", "ray-head.example:6379")
    assert checkout_env(shared_checkout())["RAY_ADDRESS"] == "ray-head.example:6379"


def test_a_config_error_on_every_client_stops_the_run_once(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A client-side run-config error comes back as one error reply per client (no traceback),
    and the server stops the run with it, once."""
    app = ClientApp(mods=[config_error_reply])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        raise ConfigError("run-config key 'data-root' = '/nowhere': no such folder on this node")

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return handle_query(msg, context)

    raw = full_config({"num-clients": 2, "num-server-rounds": 2, "run-dir": str(tmp_path / "r")})
    with pytest.raises(ConfigError, match=r"^run-config key 'data-root' = '/nowhere': no such folder on this node$"):
        serve(LocalGrid(app, raw, 2), raw)
    assert "Traceback" not in capfd.readouterr().err
    assert rundir.read_failure(tmp_path / "r") == "run-config key 'data-root' = '/nowhere': no such folder on this node"
