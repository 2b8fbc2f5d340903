"""FedBN: BatchNorm parameters and running statistics never reach the server and stay each
client's own across rounds; every other parameter is FedAvg's average."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedapp.core.state import DiskStore
from fedapp.methods.fedbn import batchnorm_parameters
from fedapp.methods.personal import THETA
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.server.checkpoint import client_state_dir
from fedapp.sim.run_local import full_config, run_local

CLIENTS, ROUNDS, STEPS = 3, 2, 3
RUN = {
    "method": "fedbn", "model": "cnn-bn", "dataset": "digits", "num-clients": CLIENTS, "partition": "iid",
    "num-server-rounds": ROUNDS, "local-steps": STEPS, "batch-size": 8, "client-weighting": "uniform", "state-store": "disk",
}  # fmt: skip


def test_batchnorm_stays_local_and_the_rest_is_fedavgs_average(tmp_path: Path) -> None:
    out = run_local({**RUN, "run-dir": str(tmp_path / "fedbn")})
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    with np.load(out / "model.npz") as z:
        final = {k: z[k] for k in z.files}
    model = build_model(resolve(full_config(RUN))[0], (1, 8, 8), 10, seed=0)
    w0 = {k: v.numpy() for k, v in model.state_dict().items()}
    bn_params = batchnorm_parameters(model)
    bn_layers = {n.rsplit(".", 1)[0] for n in bn_params}
    bn = {k for k in w0 if k.rsplit(".", 1)[0] in bn_layers}  # affine parameters and running statistics
    assert bn_params == {f"{layer}.{p}" for layer in (1, 4, 7, 10, 13) for p in ("weight", "bias")}  # cnn-bn's five BatchNorm2d
    assert {k.rsplit(".", 1)[1] for k in bn} == {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}

    clients = [DiskStore(client_state_dir(out)).load(p, THETA) for p in range(CLIENTS)]
    for k in bn:  # the server's copy is w0's: no BatchNorm value was ever averaged
        np.testing.assert_array_equal(final[k], w0[k], err_msg=k)
    for theta in clients:  # each client's own statistics ran on through both rounds (a reset would leave STEPS)
        for k in bn:
            if k.endswith("num_batches_tracked"):
                assert int(theta[k]) == ROUNDS * STEPS, k
    for k in bn_params:  # trained locally, different per client
        assert not np.array_equal(clients[0][k], w0[k]) and not np.array_equal(clients[0][k], clients[1][k]), k
    for k in set(w0) - bn:  # every client trained in the last round: the global is the plain mean of their models
        mean = np.mean([theta[k].astype(np.float64) for theta in clients], axis=0)
        np.testing.assert_allclose(final[k], mean, rtol=1e-6, atol=1e-7, err_msg=k)
        assert not np.array_equal(final[k], w0[k]), k
    assert all(r["clients"] == CLIENTS and r["evaluated_clients"] == CLIENTS for r in rows)
    assert 0 < rows[-1]["personal_fraction"] < 0.05  # BatchNorm's affine parameters are a sliver of the CNN
