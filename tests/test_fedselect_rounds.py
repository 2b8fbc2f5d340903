"""FedSelect rounds through the real ClientApp and MaskedStrategy (in-process grid).

Checks each reply against the client's mask on disk: only global coordinates travel,
bytes_up shrinks as masks grow, the server averages each coordinate over the clients
for which it is global, and a coordinate personal for every client keeps its value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flwr.app import Array, ConfigRecord

from fedapp.client_app import app as client_app
from fedapp.core import wire
from fedapp.core.state import DiskStore
from fedapp.data import dataset_for
from fedapp.engine.local_grid import LocalGrid
from fedapp.methods.personal import MASK_CURRENT, THETA, eligible, unpack
from fedapp.methods.registry import resolve
from fedapp.models import build_model
from fedapp.server.strategy import MaskedStrategy
from fedapp.sim.run_local import full_config

N = 3


def array_bytes(arr: np.ndarray) -> int:
    return len(Array(arr).data)


def test_uploads_carry_global_coordinates_only_and_server_averages_per_coordinate(tmp_path: Path) -> None:
    raw = full_config(
        {
            "method": "fedselect", "num-clients": N, "partition": "0,1,2|3,4,5|6,7,8,9", "local-test-fraction": 0.5,
            "personal-rate": 0.5, "personal-limit": 0.8, "local-alt-epochs": 1, "batch-size": 16, "client-weighting": "uniform",
            "state-store": "disk", "run-dir": str(tmp_path / "run"),
        }
    )  # fmt: skip
    cfg, method, params = resolve(raw)
    ds = dataset_for(cfg)
    model = build_model(cfg, ds.in_shape, ds.num_classes, seed=cfg.seed)
    shapes = eligible(model)
    arrays = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    grid = LocalGrid(client_app, raw, N)
    strategy = MaskedStrategy(cfg, method.server(cfg, params, arrays, {}, model), {p: 1000 + p for p in range(N)})
    store = DiskStore(tmp_path / "run" / "client-state")
    record, ups, downs, all_personal_seen = wire.to_record(arrays), [], [], 0
    for rnd in range(1, 5):
        old = wire.from_record(record)
        replies = list(grid.send_and_receive(strategy.configure_train(rnd, record, ConfigRecord(), grid)))
        expected_bytes, global_masks, thetas = 0, [], []
        for reply in replies:
            assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
            pid = int(reply.content["metrics"]["partition-id"])  # type: ignore[arg-type]
            m_cur = unpack(store.load(pid, MASK_CURRENT), shapes)
            theta = store.load(pid, THETA)
            got = wire.decode(reply.content["values"], reply.content["mask"], old, 1.0)  # type: ignore[arg-type]
            assert set(got.values) == {n for n, m in m_cur.items() if (~m).any()}  # parameters only, never a personal-only tensor
            for n, m in m_cur.items():
                if not (~m).any():
                    continue
                sent = got.mask_of(n, m.size)
                assert sent is not None and np.array_equal(sent, ~m.reshape(-1))
                assert np.array_equal(got.values[n].reshape(-1), theta[n][~m])
                expected_bytes += array_bytes(theta[n][~m]) + len(n)
                if m.any():
                    expected_bytes += array_bytes(np.packbits(~m.reshape(-1))) + len(n)
            global_masks.append({n: ~m for n, m in m_cur.items()})
            thetas.append(theta)
        result = strategy.aggregate_train(rnd, replies)
        new = result.arrays
        assert new is not None and result.stats.failures == 0
        assert result.stats.bytes_up == expected_bytes
        ups.append(result.stats.bytes_up)
        downs.append(result.stats.bytes_down)
        new_np = wire.from_record(new)
        for n in shapes:
            count = np.sum([g[n] for g in global_masks], axis=0)
            total = np.sum([np.where(g[n], t[n], 0.0) for g, t in zip(global_masks, thetas, strict=True)], axis=0)
            none = count == 0
            all_personal_seen += int(none.sum())
            assert np.array_equal(new_np[n][none], old[n][none])  # personal for every client: unchanged
            np.testing.assert_allclose(new_np[n][~none], (total / np.maximum(count, 1))[~none], rtol=1e-6, atol=1e-7)
        for buf in set(arrays) - set(shapes):
            assert np.array_equal(new_np[buf], old[buf])
        record = new
    assert all_personal_seen > 0  # the unchanged-value check was exercised
    assert ups[0] > ups[1] > ups[2] > ups[3]  # masks grow 0 -> 50% -> 75% -> 80% (capped)
    assert downs[0] == downs[1] > downs[2] > downs[3]  # round r sends round r-1's global coordinates
