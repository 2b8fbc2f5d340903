"""A compromised node in a real deployment (SuperLink + two SuperNodes on 127.0.0.1, TLS and
node authentication, started with `fedapp deploy`): node 1's ClientApp is patched from outside
the project, the way an attacker who owns that device would do it (a ``sitecustomize`` on its
PYTHONPATH that wraps Flower's ``ClientApp.__call__``), so that every training reply claims
``num-examples = inf`` or, when its task was part of the model (a FedPart layer group), covers
every layer. Five rounds later the global model is finite and has moved every round (the honest
node's update), and node 1's failures are counted with their reason."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.deploy_harness import Federation, rows

pytestmark = pytest.mark.flwr

BAD = 1
SITECUSTOMIZE = '''
"""Installed by whoever controls this device: a reply to a task of part of the model covers the whole
model; any other training reply claims infinitely many samples."""
import flwr.clientapp.client_app as _client_app

_call = _client_app.ClientApp.__call__


def _lying_call(self, message, context):
    reply = _call(self, message, context)
    if message.metadata.message_type != "train" or reply.has_error():
        return reply
    values, sent = reply.content["values"], message.content["arrays"]
    missing = [name for name in sent if name not in values and "num_batches" not in name]
    if missing:  # a task of part of the model (FedPart's layer group): send the rest too
        for name in missing:
            values[name] = sent[name]
    else:
        reply.content["metrics"]["num-examples"] = float("inf")
    return reply


_client_app.ClientApp.__call__ = _lying_call
'''

RUN = {
    "num-clients": 2, "dataset": "digits", "partition": "0,1,2,3,4|5,6,7,8,9", "local-steps": 4, "lr": 0.3,
    "min-replies": 1, "round-timeout": 120.0, "num-server-rounds": 5,
}  # fmt: skip


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    tmp = tmp_path_factory.mktemp("faults-deploy")
    attacker = tmp / "attacker"
    attacker.mkdir()
    (attacker / "sitecustomize.py").write_text(SITECUSTOMIZE)
    federation = Federation(tmp, 2, node_env={BAD: {"PYTHONPATH": str(attacker)}})
    try:
        yield federation.start()
    finally:
        federation.stop()


def test_a_node_claiming_infinite_samples_every_round_is_counted_and_never_averaged(fed: Federation) -> None:
    run_dir = fed.tmp / "run"
    log = fed.run({**RUN, "run-dir": str(run_dir)}, "run-inf")
    out = rows(run_dir)
    assert [r["round"] for r in out] == [1, 2, 3, 4, 5], log[-3000:]
    for r in out:
        assert (r["clients"], r["failures"], r["failed_pids"]) == (1, 1, [BAD]), r
        assert "num-examples = inf is not allowed" in r["failure_reasons"][0]
        assert np.isfinite(r["accuracy"]) and np.isfinite(r["loss"])
    assert len({r["loss"] for r in out}) == 5  # the honest update was installed every round: never frozen
    with np.load(run_dir / "model.npz") as model:
        assert all(np.isfinite(model[k]).all() for k in model.files)


def test_a_fedpart_node_sending_every_layer_is_refused_each_round_and_named(fed: Federation) -> None:
    run_dir = fed.tmp / "run-fedpart"
    over = {
        "method": "fedpart",
        "mlp-hidden": "32",
        "warmup-rounds": 0,
        "cycles": 1,
        "rounds-per-layer": 1,
        "full-rounds-between-cycles": 0,
    }
    log = fed.run({**RUN, **over, "num-server-rounds": 2, "run-dir": str(run_dir)}, "run-fedpart")
    out = rows(run_dir)
    assert [r["round"] for r in out] == [1, 2], log[-3000:]
    for r in out:
        assert (r["clients"], r["failures"], r["failed_pids"]) == (1, 1, [BAD]), r
        assert "entries outside its task" in r["failure_reasons"][0], r["failure_reasons"]
