"""Optional MLflow output (run-config ``mlflow-uri``): the run's resolved config as MLflow params,
its code version as tags and every number of each round's metrics row as a metric at
step = round, in one MLflow run named after the run folder, experiment ``fedapp``.

``mlflow-uri = "local"`` keeps a SQLite store in the run folder (``<run-dir>/mlflow.db``; open it
with ``mlflow ui --backend-store-uri sqlite:///<run-dir>/mlflow.db``); any other value is a
tracking URI, e.g. one SQLite file for a whole study so MLflow compares its runs. The MLflow
run id is kept in ``<run-dir>/mlflow.json``, so ``resume = true`` continues the same MLflow run.
Off by default; ``mlflow`` (mlflow-skinny) is not a dependency of fedapp, and a run that asks
for it without the package stops before its first round with one line saying how to install it."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedapp.core.config import ConfigError
from fedapp.server.results import read_config_and_provenance

EXPERIMENT = "fedapp"
LOCAL_DB = "mlflow.db"
RUN_ID_FILE = "mlflow.json"
PARAM_LIMIT = 6000  # characters MLflow keeps of a param value


def tracking_uri(run_dir: Path, uri: str) -> str:
    return f"sqlite:///{run_dir.resolve() / LOCAL_DB}" if uri == "local" else uri


class MlflowSink:
    def __init__(self, run_dir: str | Path, uri: str, resume: bool = False):
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise ConfigError(
                f"run-config key 'mlflow-uri' = {uri!r} needs the mlflow package, which is not installed: "
                "pip install mlflow-skinny (or pip install -e '.[mlflow]')"
            ) from None
        self.dir = Path(run_dir)
        self.uri = tracking_uri(self.dir, uri)
        self.resume = resume
        self.client_class = MlflowClient
        self.client: Any = None  # made with the first row: checking for the package touches no file
        self.run_id = ""

    def start(self) -> None:
        """The MLflow run: the one recorded in mlflow.json when resuming with the same URI, else a new one with the config."""
        self.client = self.client_class(tracking_uri=self.uri)
        kept = self.dir / RUN_ID_FILE
        if self.resume and kept.exists():
            record = json.loads(kept.read_text())
            if record.get("tracking_uri") == self.uri:
                self.run_id = str(record["run_id"])
                self.client.update_run(self.run_id, status="RUNNING")
                return
        found = self.client.get_experiment_by_name(EXPERIMENT)
        experiment = found.experiment_id if found else self.client.create_experiment(EXPERIMENT)
        config, provenance = read_config_and_provenance(self.dir)
        git = provenance.get("git") or {}
        tags = {"fedapp.run_dir": str(self.dir.resolve())}
        if git.get("commit"):
            tags["mlflow.source.git.commit"] = str(git["commit"])
        run = self.client.create_run(experiment, run_name=self.dir.name, tags=tags)
        self.run_id = run.info.run_id
        kept.write_text(json.dumps({"tracking_uri": self.uri, "run_id": self.run_id}, indent=2) + "\n")
        from mlflow.entities import Param

        params = [Param(k, json.dumps(v) if not isinstance(v, str) else v) for k, v in sorted(config.items())]
        self.client.log_batch(self.run_id, params=[Param(p.key, p.value[:PARAM_LIMIT]) for p in params])

    def add(self, row: Mapping[str, Any]) -> None:
        """Each finite number in ``row`` (not ``round``, not nested per-client tables) at step = round."""
        from mlflow.entities import Metric

        if self.client is None:
            self.start()
        step, stamp = int(row["round"]), int(time.time() * 1000)
        metrics = [
            Metric(key, float(value), stamp, step)
            for key, value in row.items()
            if key != "round" and isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        ]  # fmt: skip
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        if self.client is not None:
            self.client.set_terminated(self.run_id)
