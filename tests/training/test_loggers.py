"""Experiment trackers (logger=csv|tensorboard|mlflow): the record's epochs and results, in each."""
from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipegnn import run

from tests.helpers import TINY_SYNTHETIC, cli, make_cfg


def test_every_tracker_gets_the_records_epochs_params_and_files(tmp_path: Path) -> None:
    """A 2-process pipeline with all three trackers: each epoch's figures (losses, accuracies, per-stage
    busy time) as the record has them, logged once (by the launcher, from rank 0's epochs); the config
    as MLflow parameters; result.json and trace.json as MLflow artifacts; the final figures."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    record = run(make_cfg("logger=[csv,tensorboard,mlflow]", "engine=pipelining"), output_dir=tmp_path)
    assert record["status"] == "completed", record["error"]
    losses = [e["train_loss"] for e in record["epochs"]]
    busy = [e["pipeline"]["stages"][1]["busy_s"] for e in record["epochs"]]
    assert len(losses) == 3

    with open(tmp_path / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["train_loss"]) for r in rows] == losses
    assert [float(r["pipeline/stage1_busy_s"]) for r in rows] == busy
    final = dict(csv.reader(open(tmp_path / "csv" / "final.csv")))
    assert final["status"] == "completed"
    assert float(final["final/test_acc_at_best_val"]) == record["final"]["test_acc_at_best_val"]

    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1  # one writer: the launcher's
    board = EventAccumulator(str(events[0])).Reload()
    assert [s.value for s in board.Scalars("train_loss")] == pytest.approx(losses, rel=1e-6)
    assert [s.step for s in board.Scalars("val_acc")] == [0, 1, 2]
    assert [s.value for s in board.Scalars("pipeline/stage1_busy_s")] == pytest.approx(busy, rel=1e-6)

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("pipegnn").experiment_id])
    assert len(runs) == 1
    mlrun = runs[0]
    assert [m.value for m in client.get_metric_history(mlrun.info.run_id, "train_loss")] == losses
    assert mlrun.data.params["chunks"] == "4" and mlrun.data.params["engine.name"] == "pipelining"
    assert mlrun.data.metrics["final/best_val_acc"] == record["final"]["best_val_acc"]
    assert mlrun.data.tags["status"] == "completed" and mlrun.info.status == "FINISHED"
    assert sorted(a.path for a in client.list_artifacts(mlrun.info.run_id)) == ["result.json", "trace.json"]


def test_a_failing_tracker_costs_the_run_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "csv").write_text("a file where the tracker's folder would go")
    record = run(make_cfg("logger=[csv,tensorboard]"), output_dir=tmp_path)
    assert record["status"] == "completed" and (tmp_path / "result.json").is_file()
    assert "logger csv failed and is switched off: FileExistsError" in caplog.text
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))  # the other one still logs


def test_unknown_or_missing_trackers_are_refused_before_training(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    cfg = OmegaConf.to_container(make_cfg(), resolve=True)
    cfg["logger"] = {"wandb": {}}
    record = run(cfg, output_dir=tmp_path)
    assert record["status"] == "invalid" and record["epochs"] == []
    assert record["error"] == "logger.wandb is not a key of LoggerConfig; its keys: csv, tensorboard, mlflow"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    record = run(make_cfg("logger=mlflow"), output_dir=tmp_path)
    assert record["status"] == "invalid" and "logger=mlflow needs the 'mlflow' package" in record["error"]


@pytest.mark.slow  # make test-all; each tracker's own tests stay in make test
def test_a_sweep_logged_to_tensorboard_and_mlflow_reads_back_every_epoch(tmp_path: Path) -> None:
    """A 2-job Hydra sweep with both trackers and one MLflow store for the sweep: each job's every epoch
    reads back through TensorBoard's event reader (the job's folder) and the MLflow client (one run per
    job in the shared experiment), equal to the job's record."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store, sweep = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "sweep"
    done = cli(tmp_path, "-m", *TINY_SYNTHETIC, "train.epochs=3", "train.seed=0,1",
               "logger=[tensorboard,mlflow]", f"logger.mlflow.tracking_uri={store}",
               f"hydra.sweep.dir={sweep}")
    assert done.returncode == 0, done.stderr[-2000:]
    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("pipegnn").experiment_id])
    by_seed = {r.data.params["train.seed"]: r for r in runs}
    assert sorted(by_seed) == ["0", "1"]
    for job in ("0", "1"):
        record = json.loads((sweep / job / "result.json").read_text())
        losses = [e["train_loss"] for e in record["epochs"]]
        accs = [e["val_acc"] for e in record["epochs"]]
        events = next((sweep / job / "tensorboard").glob("events.out.tfevents.*"))
        board = EventAccumulator(str(events)).Reload()
        assert [s.value for s in board.Scalars("train_loss")] == pytest.approx(losses, rel=1e-6)
        assert [s.value for s in board.Scalars("val_acc")] == pytest.approx(accs, rel=1e-6)
        mlrun = by_seed[str(record["config"]["train"]["seed"])]
        assert [m.value for m in client.get_metric_history(mlrun.info.run_id, "train_loss")] == losses
        assert [m.step for m in client.get_metric_history(mlrun.info.run_id, "val_acc")] == [0, 1, 2]
