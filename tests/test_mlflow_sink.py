"""run-config mlflow-uri: the run's config and every number of each metrics row reach an MLflow
run (read back with MLflow's own client, from a SQLite tracking store), a resumed run continues
the same MLflow run, a bad URI or a missing package stops the run before round one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fedapp.core.config import ConfigError, RunConfig, parse
from fedapp.sim.run_local import run_local

pytest.importorskip("mlflow", reason="the dev extra installs mlflow-skinny")

RUN = {"dataset": "digits", "num-clients": 2, "partition": "iid", "lr": 0.2, "local-steps": 2, "num-server-rounds": 2}


def test_the_sink_logs_rows_as_steps_and_the_config_as_params(tmp_path: Path) -> None:
    """The sink alone (no federation): a run-local SQLite store, read back with MLflow's client."""
    from mlflow.tracking import MlflowClient

    from fedapp.server.mlflow_sink import MlflowSink

    (tmp_path / "config.json").write_text(json.dumps({"lr": 0.05, "method": "fedprox", "provenance": {"git": {"commit": "abc123"}}}))
    rows = [
        {"round": 1, "accuracy": 0.25, "bytes_up": 1000, "train_seconds": {"0": 1.0}, "warmup": True, "loss": float("nan")},
        {"round": 2, "accuracy": 0.5, "bytes_up": 2000, "train_seconds": {"0": 1.0}, "warmup": False, "loss": 1.5},
    ]
    sink = MlflowSink(tmp_path, "local")
    for row in rows:
        sink.add(row)
    sink.close()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(json.loads((tmp_path / "mlflow.json").read_text())["run_id"])
    assert run.data.params == {"lr": "0.05", "method": "fedprox"} and run.data.tags["mlflow.source.git.commit"] == "abc123"
    assert set(run.data.metrics) == {"accuracy", "bytes_up", "loss"}  # numbers only: no tables, no flags
    assert sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "accuracy")) == [(1, 0.25), (2, 0.5)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [(2, 1.5)]  # NaN left out
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name


@pytest.mark.slow
def test_metrics_rows_and_config_reach_mlflow_and_resume_continues_the_run(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'study.db'}"
    run = run_local({**RUN, "mlflow-uri": uri, "run-dir": str(tmp_path / "run")})
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("fedapp")
    assert experiment is not None
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "run" and found.info.status == "FINISHED"
    config = json.loads((run / "config.json").read_text())
    assert found.data.params["lr"] == "0.2" and found.data.params["method"] == "fedavg"
    assert found.data.params["num-server-rounds"] == str(config["num-server-rounds"]) == "2"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    numbers = {k for k, v in rows[0].items() if k != "round" and isinstance(v, int | float) and not isinstance(v, bool)}
    assert {"accuracy", "loss", "bytes_up", "seconds"} <= numbers and set(found.data.metrics) == numbers
    for key in ("accuracy", "loss", "bytes_up"):
        history = sorted((m.step, m.value) for m in client.get_metric_history(found.info.run_id, key))
        assert history == [(r["round"], r[key]) for r in rows]

    run_local({**RUN, "num-server-rounds": 3, "resume": True, "mlflow-uri": uri, "run-dir": str(run)})
    (again,) = client.search_runs([experiment.experiment_id])  # the same MLflow run, one more step
    assert again.info.run_id == found.info.run_id and again.info.status == "FINISHED"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    history = sorted((m.step, m.value) for m in client.get_metric_history(found.info.run_id, "accuracy"))
    assert history == [(r["round"], r["accuracy"]) for r in rows] and len(rows) == 3


@pytest.mark.parametrize("uri", ["mlruns", "sqlite:///relative.db", "ftp://host/x"])
def test_a_uri_mlflow_cannot_use_or_a_relative_path_is_refused(uri: str) -> None:
    with pytest.raises(ConfigError, match=rf"'mlflow-uri' = '{uri}'.*sqlite with an absolute path"):
        parse(RunConfig, {"mlflow-uri": uri})
    assert parse(RunConfig, {"mlflow-uri": "local"}).mlflow_uri == "local"


def test_without_the_package_the_run_stops_before_round_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"'mlflow-uri' = 'local' needs the mlflow package.*pip install -e '.\[mlflow\]'"):
        run_local({**RUN, "mlflow-uri": "local", "run-dir": str(tmp_path / "run")})
    assert not (tmp_path / "run").exists()
