"""Experiment trackers beside the record: a run's epochs and results in CSV, TensorBoard or MLflow.

``logger`` (a config group, several at once: ``logger=[csv,tensorboard]``; none by default) names the
trackers of a run. Each gets, per epoch, the epoch's figures as metrics
([`epoch_metrics`][pipegnn.training.loggers.epoch_metrics]: losses, accuracies, epoch and evaluation time,
historical staleness, the pipeline's makespan and bubble and every stage's busy time), and at the end the
resolved config as parameters, the final figures and the run's files (``result.json``, ``trace.json``,
``train.log``) as artifacts where the tracker keeps files.

Only the process that writes the record logs: a spawned pipeline's launcher (it receives rank 0's
epochs), rank 0 under torchrun. A tracker that fails while the run trains is switched off with a
warning: the record never depends on it. A tracker whose package is missing is refused before training.

The trackers are the libraries' own (``csv``, torch's ``SummaryWriter``, ``mlflow``); this module only
maps a record onto them.
"""
from __future__ import annotations

import csv
import importlib.util
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from pipegnn.atomic import atomic_file
from pipegnn.config.schema import Config, LoggerConfig, MLflowConfig, TrackerConfig
from pipegnn.errors import ConfigError

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

#: Files of a run's output directory logged as artifacts (those that exist).
ARTIFACTS = ("result.json", "trace.json", "train.log")


def epoch_metrics(entry: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of one epoch's record entry as ``name: value`` (``pipeline/bubble``,
    ``pipeline/stage1_busy_s``, ...)."""
    out = {k: float(v) for k, v in entry.items()
           if k != "epoch" and isinstance(v, (int, float)) and not isinstance(v, bool)}
    pipeline = entry.get("pipeline") or {}
    for key in ("makespan_s", "bubble", "imbalance", "communication_s", "ideal_speedup"):
        if isinstance(pipeline.get(key), (int, float)):
            out[f"pipeline/{key}"] = float(pipeline[key])
    for s, stage in enumerate(pipeline.get("stages") or []):
        out[f"pipeline/stage{s}_busy_s"] = float(stage["busy_s"])
    return {k: v for k, v in out.items() if math.isfinite(v)}


def final_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """The run's final figures: ``final/...`` (accuracies, best epoch), ``timing/...`` medians and totals,
    ``memory/peak_rss_bytes``."""
    out: dict[str, float] = {}
    for section in ("final", "timing"):
        for k, v in (record.get(section) or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out[f"{section}/{k}"] = float(v)
    peak = (record.get("memory") or {}).get("peak_rss_bytes")
    if isinstance(peak, (int, float)):
        out["memory/peak_rss_bytes"] = float(peak)
    return out


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """The resolved config as ``dotted.key: value`` strings (lists joined by ',')."""
    out: dict[str, str] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out.update(flat_params(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
    return out


class CSVLogger:
    """``<dir>/metrics.csv``: one row per epoch (the columns of the first epoch, and any new ones added
    as they appear), and ``<dir>/final.csv``: the final figures as ``name,value``."""

    package = None

    def __init__(self, directory: Path, settings: TrackerConfig, config: Mapping[str, Any]):
        self.dir = directory / settings.dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = []

    def epoch(self, epoch: int, metrics: Mapping[str, float]) -> None:
        self.rows.append({"epoch": epoch, **metrics})
        columns = list(dict.fromkeys(k for row in self.rows for k in row))
        # rewritten (columns may grow) as a whole file replaced: a FIFO at the path never blocks the run
        with atomic_file(self.dir / "metrics.csv") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(self.rows)

    def finish(self, record: Mapping[str, Any], metrics: Mapping[str, float], files: list[Path]) -> None:
        with atomic_file(self.dir / "final.csv") as f:
            writer = csv.writer(f)
            writer.writerow(["name", "value"])
            writer.writerows([["status", record.get("status")], *sorted(metrics.items())])


class TensorBoardLogger:
    """torch's ``SummaryWriter`` into ``<dir>``: every epoch metric as a scalar (step: the epoch), the
    resolved config as text, the final figures as scalars at the last epoch."""

    package = "tensorboard"

    def __init__(self, directory: Path, settings: TrackerConfig, config: Mapping[str, Any]):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory / settings.dir))
        params = flat_params(config)
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in params.items()))
        self.last = 0

    def epoch(self, epoch: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, epoch)
        self.last = epoch

    def finish(self, record: Mapping[str, Any], metrics: Mapping[str, float], files: list[Path]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, self.last)
        self.writer.add_text("status", str(record.get("status")))
        self.writer.close()


class MLflowLogger:
    """An MLflow run in experiment ``experiment`` at ``tracking_uri`` (default: a SQLite store in the
    output directory, ``sqlite:///<dir>/mlflow.db``, artifacts beside it): the config as parameters,
    epoch metrics with the epoch as step, the final figures, the run's files as artifacts, its status.
    Through ``MlflowClient`` with the run's id, not the fluent API, whose active run is per thread (a
    spawned pipeline's epochs arrive on the launcher's reader thread)."""

    package = "mlflow"

    def __init__(self, directory: Path, settings: MLflowConfig, config: Mapping[str, Any]):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        folder = directory / settings.dir
        folder.mkdir(parents=True, exist_ok=True)
        remote = settings.tracking_uri
        self.client = MlflowClient(remote or f"sqlite:///{(folder / 'mlflow.db').resolve()}")
        name = settings.experiment
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            artifacts = None if remote else (folder / "artifacts").resolve().as_uri()
            experiment_id = self.client.create_experiment(name, artifact_location=artifacts)
        self.run_id = self.client.create_run(experiment_id, run_name=settings.run_name).info.run_id
        self.last = 0  # the last epoch logged: the final figures' step
        params = [Param(k, v[:6000]) for k, v in flat_params(config).items()]  # MLflow's longest value
        for start in range(0, len(params), 100):  # MLflow's most parameters per batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])

    def _metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows = [Metric(k, v, now, step) for k, v in metrics.items()]
        for start in range(0, len(rows), 1000):  # MLflow's most metrics per batch
            self.client.log_batch(self.run_id, metrics=rows[start:start + 1000])

    def epoch(self, epoch: int, metrics: Mapping[str, float]) -> None:
        self._metrics(metrics, epoch)
        self.last = epoch

    def finish(self, record: Mapping[str, Any], metrics: Mapping[str, float], files: list[Path]) -> None:
        self._metrics(metrics, self.last)
        for file in files:
            self.client.log_artifact(self.run_id, str(file))
        self.client.set_tag(self.run_id, "status", str(record.get("status")))
        self.client.set_terminated(self.run_id,
                                   "FINISHED" if record.get("status") == "completed" else "FAILED")


#: ``logger.<name>`` option: its class.
LOGGERS: dict[str, type[CSVLogger | TensorBoardLogger | MLflowLogger]] = {
    "csv": CSVLogger, "tensorboard": TensorBoardLogger, "mlflow": MLflowLogger}


def chosen(settings: LoggerConfig | None) -> dict[str, TrackerConfig]:
    """The trackers a run's ``logger`` config chose, by name, with their settings."""
    if settings is None:
        return {}
    return {name: getattr(settings, name) for name in LOGGERS if getattr(settings, name) is not None}


def check_loggers(settings: LoggerConfig | None) -> None:
    """Raise ConfigError for a tracker whose package is not installed (the schema knows the trackers), or
    whose ``dir`` lies outside the run's folder (absolute, or climbing out with ``..``: it wrote into
    another run's folder)."""
    for name, options in chosen(settings).items():
        where = Path(str(options.dir))
        if where.is_absolute() or ".." in where.parts:
            raise ConfigError(f"logger.{name}.dir={options.dir} lies outside the run's folder (another "
                              "run's, perhaps): give a folder inside it, e.g. the default, "
                              f"logger.{name}.dir={name}")
        package = LOGGERS[name].package
        if package is not None and importlib.util.find_spec(package) is None:
            install = "mlflow-skinny sqlalchemy alembic" if name == "mlflow" else package
            raise ConfigError(f"logger={name} needs the {package!r} package, which is not installed: "
                              f"pip install {install} (requirements.txt pins them)")


class Loggers:
    """The run's trackers (``logger`` config), fed each epoch and finished with the record; a tracker
    that raises is dropped with a warning. ``plain``: the config as the record holds it (parameters)."""

    def __init__(self, directory: str | Path, config: Config, plain: Mapping[str, Any]):
        trackers = chosen(config.logger)
        check_loggers(config.logger)
        self.dir = Path(directory)
        for name, options in trackers.items():  # a link planted in the run's folder wrote into another's
            where = self.dir
            for part in Path(str(options.dir)).parts:
                where = where / part
                if where.is_symlink():
                    raise ConfigError(f"logger.{name}.dir: {where} is a link (to {os.readlink(where)}): the "
                                      "tracker would write into another folder; remove it")
        self.active: dict[str, Any] = {}
        #: The trackers switched off: name -> the error (the record's ``unwritten`` names them).
        self.failures: dict[str, str] = {}
        # _guard calls each lambda at once; the defaults bind this iteration's name and options.
        for name, options in trackers.items():
            self._guard(name, lambda name=name, options=options:
                        self.active.update({name: LOGGERS[name](self.dir, options, plain)}))

    def _guard(self, name: str, work: Any) -> None:
        try:
            work()
        except Exception as e:  # a tracker must never cost the run its record
            log.warning("logger %s failed and is switched off: %s: %s", name, type(e).__name__, e)
            self.failures[name] = f"{type(e).__name__}: {e}"
            self.active.pop(name, None)

    def _each(self, call: str, *args: Any) -> None:
        for name, tracker in list(self.active.items()):
            self._guard(name, lambda tracker=tracker: getattr(tracker, call)(*args))

    def epoch(self, entry: Mapping[str, Any]) -> None:
        self._each("epoch", int(entry["epoch"]), epoch_metrics(entry))

    def finish(self, record: Mapping[str, Any], files: Iterable[str] = ARTIFACTS) -> None:
        paths = [self.dir / f for f in files if (self.dir / f).is_file()]
        self._each("finish", record, final_metrics(record), paths)
