"""End-to-end runs: the result record, training-level transparency, the Hydra entry point."""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from pipegnn import ConfigError, build, run
from pipegnn.results import STATUSES

from tests.helpers import ROOT, make_cfg


def test_record_has_every_field(tmp_path: Path) -> None:
    record = run(make_cfg("chunks=2", "engine.checkpoint=always"), output_dir=tmp_path,
                 choices={"model": "gat"})
    assert record["status"] == "completed", record["error"]
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "completed"
    assert record["config"]["chunks"] == 2 and record["choices"] == {"model": "gat"}
    for key in ("python", "torch", "torch_geometric", "dgl", "torchgpipe", "git_sha", "host", "cpu",
                "gpus"):
        assert key in record["env"]
    assert record["env"]["torch"].startswith("2.")
    assert [e["epoch"] for e in record["epochs"]] == [0, 1, 2]
    for epoch in record["epochs"]:
        assert set(epoch) >= {"train_loss", "train_acc", "val_acc", "test_acc", "epoch_time_s"}
        assert 0.0 <= epoch["val_acc"] <= 1.0 and epoch["epoch_time_s"] > 0
    final = record["final"]
    assert final["best_val_acc"] == max(e["val_acc"] for e in record["epochs"])
    assert final["test_acc"] == record["epochs"][-1]["test_acc"]
    timing = record["timing"]
    assert timing["epoch_time_median_s"] == statistics.median(
        e["epoch_time_s"] for e in record["epochs"][1:])
    assert timing["total_s"] >= timing["setup_s"] + timing["microbatch_build_s"]
    assert record["memory"]["peak_rss_bytes"] > 50e6 and record["memory"]["peak_device_bytes"] == {}
    mb = record["microbatch"]
    assert (mb["chunks"], mb["halo"], mb["partition"]) == (2, "exact", "metis")
    assert sum(mb["targets_per_chunk"]) == 30 and mb["replication"] >= 1.0
    for key in ("inflation", "cut_edge_fraction", "padding_fraction"):
        assert key in mb
    # The work each layer did: the first layer's transform over the distinct rows (once per step).
    work = mb["work"]
    assert work["first_transform"] == "once_per_step"
    assert work["transform_rows"][0] == mb["distinct_rows_per_layer"][0] < mb["rows_per_layer"][0]
    assert work["transform_rows"][1:] == mb["rows_per_layer"][1:]
    assert work["propagate_edges"] == mb["edges_per_layer"]
    assert mb["inflation"] == work["inflation"] < mb["inflation_per_micro_batch"]
    assert mb["eval"]["work"]["transform_rows"][0] == mb["eval"]["distinct_rows_per_layer"][0]


def test_record_counts_per_micro_batch_first_transform() -> None:
    record = run(make_cfg("chunks=2", "train.epochs=1", "microbatch.first_transform=per_micro_batch"))
    mb = record["microbatch"]
    assert mb["work"]["transform_rows"] == mb["rows_per_layer"]
    assert mb["inflation"] == mb["inflation_per_micro_batch"] == mb["work"]["inflation"]


def _losses(*overrides: str) -> list[float]:
    record = run(make_cfg("model.dropout=0", "train.epochs=4", *overrides))
    assert record["status"] == "completed", record["error"]
    return [e["train_loss"] for e in record["epochs"]]


@pytest.mark.parametrize("model", ["gat", "gcn"])
def test_training_is_transparent(model: str) -> None:
    """Same seed, dropout 0: full-batch, single-engine micro-batches and GPipe micro-batches train
    the same model (per-epoch losses agree)."""
    full = _losses(f"model={model}", "engine=single", "chunks=1", "microbatch.halo=none")
    single = _losses(f"model={model}", "engine=single", "chunks=4")
    gpipe = _losses(f"model={model}", "engine=gpipe", "chunks=4")
    assert full == pytest.approx(single, rel=1e-5)
    assert full == pytest.approx(gpipe, rel=1e-5)
    # GPipe's naive chunks (sequential ranges) lose the edges between chunks, and train another model
    naive = _losses(f"model={model}", "engine=gpipe", "chunks=4", "microbatch.halo=none",
                    "microbatch.partition=sequential")
    assert naive[1:] != pytest.approx(full[1:], rel=1e-3)


@pytest.mark.parametrize("framework", ["pyg", "dgl"])
@pytest.mark.parametrize("model", ["gat", "gcn", "sage"])
def test_bf16_training_follows_fp32(framework: str, model: str) -> None:
    """train.precision=bf16 (GPipe, 2 exact chunks) trains as fp32 does within bfloat16's precision
    (per-epoch losses within 1e-2 relative, not equal), and the record says so: its config has the
    precision, its dataset the features' dtype and their bytes (half of fp32's)."""
    common = (f"framework={framework}", f"model={model}", "chunks=2")
    fp32 = run(make_cfg("model.dropout=0", "train.epochs=4", *common))
    bf16 = run(make_cfg("model.dropout=0", "train.epochs=4", *common, "train.precision=bf16"))
    assert bf16["status"] == "completed", (bf16["error"], bf16.get("traceback"))
    losses32 = [e["train_loss"] for e in fp32["epochs"]]
    losses16 = [e["train_loss"] for e in bf16["epochs"]]
    assert losses16 == pytest.approx(losses32, rel=1e-2) and losses16 != losses32
    assert losses16[-1] < losses16[0]
    assert (fp32["config"]["train"]["precision"], bf16["config"]["train"]["precision"]) == ("fp32", "bf16")
    nodes, features = bf16["dataset"]["num_nodes"], bf16["dataset"]["num_features"]
    assert (fp32["dataset"]["feature_dtype"], bf16["dataset"]["feature_dtype"]) == ("float32", "bfloat16")
    assert fp32["dataset"]["feature_bytes"] == 4 * nodes * features == 2 * bf16["dataset"]["feature_bytes"]


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIPEGNN_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, errors="backslashreplace",
                          timeout=300)


def test_cli_sweep_writes_one_record_per_job(tmp_path: Path) -> None:
    from tests.helpers import TINY_SYNTHETIC

    sweep = tmp_path / "sweep"
    proc = _cli(tmp_path, "-m", *TINY_SYNTHETIC, "train.epochs=2", "chunks=1,2",
                "microbatch.halo=none,exact", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/result.json"))]
    assert len(records) == 4
    assert {(r["config"]["chunks"], r["config"]["microbatch"]["halo"]) for r in records} == \
        {(1, "none"), (1, "exact"), (2, "none"), (2, "exact")}
    assert all(r["status"] == "completed" and r["choices"]["engine"] == "gpipe" for r in records)
    assert "epoch   1  loss" in (sweep / "0" / "train.log").read_text()
    # each record keeps its job's overrides: the command line's and the sweep's values for the job
    for r in records:
        assert r["overrides"] == [*TINY_SYNTHETIC, "train.epochs=2", f"chunks={r['config']['chunks']}",
                                  f"microbatch.halo={r['config']['microbatch']['halo']}"]


def test_cli_run_names_its_record_and_trace_and_explains_its_accuracy(tmp_path: Path) -> None:
    """What make run does (engine=pipelining), on a tiny graph: no warning about its own configuration,
    the accuracy line says which figure it is, and the last line names the record and the trace."""
    from tests.helpers import TINY_SYNTHETIC

    out = tmp_path / "run"
    proc = _cli(tmp_path, "engine=pipelining", *TINY_SYNTHETIC, "train.epochs=3", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = (out / "train.log").read_text()
    assert "WARNING" not in log, log
    assert "done: test accuracy" in log and "at the best validation epoch" in log
    assert f"record: {out / 'result.json'}; trace (Perfetto, chrome://tracing): {out / 'trace.json'}" in log
    assert (out / "result.json").is_file() and (out / "trace.json").is_file()


def test_cli_invalid_run_exits_nonzero_with_record(tmp_path: Path) -> None:
    """One message naming the bad value and where the record is, no Python traceback (it used to follow
    the message); exit status 1."""
    proc = _cli(tmp_path, "chunks=0", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert out.count("chunks must be an integer >= 1, got 0") == 1  # said once
    assert f"run invalid (the error above; record in {tmp_path / 'run'})" in out
    assert "Traceback" not in out and "Error executing job" not in out
    record = json.loads((tmp_path / "run" / "result.json").read_text())
    assert record["status"] == "invalid" and record["status"] in STATUSES


@pytest.mark.parametrize("engine", ["single", pytest.param("pipelining", marks=pytest.mark.slow)])
def test_a_folder_named_in_bytes_keeps_the_runs_last_log_line(tmp_path: Path, engine: str) -> None:
    """A run started in a folder whose name is no UTF-8 (lone surrogates in Python) trained, but its log
    file lost every line naming the folder ("--- Logging error ---"), the last one among them: the record's
    place. The line is written with the bytes escaped; a pipeline's workers (a second case) append theirs
    the same way."""
    from tests.helpers import TINY_SYNTHETIC

    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/nu\xff"))
    folder.mkdir()
    proc = _cli(folder, *TINY_SYNTHETIC, "train.epochs=2", f"engine={engine}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Logging error" not in proc.stderr, proc.stderr[-2000:]
    log = next(folder.glob("outputs/*/*/train.log")).read_text()
    assert "record: " in log.splitlines()[-1] and "nu\\udcff" in log.splitlines()[-1]


PUBLISHED = {"gcn": 0.815, "gat": 0.830}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_cora_accuracy_matches_published(data_root: Path, tmp_path: Path, model: str) -> None:
    """Exact mode through GPipe with 8 chunks reaches the papers' Cora accuracy (mean of 3 seeds)."""
    accs = []
    for seed in range(3):
        cfg = make_cfg("dataset=cora", f"model={model}", "engine=gpipe", "chunks=8",
                       "microbatch.partition=metis", "train.epochs=200", f"train.seed={seed}",
                       f"data.root={data_root}", f"data.cache={tmp_path}")
        record = run(cfg)
        assert record["status"] == "completed", record["error"]
        accs.append(record["final"]["test_acc_at_best_val"])
    assert abs(statistics.mean(accs) - PUBLISHED[model]) <= 0.02, accs


@pytest.mark.parametrize(("halo", "targets", "partitions", "plans"), [
    ("exact", "all", 1, 2),  # evaluation nodes among the targets: the training partition is reused
    ("historical", "all", 1, 1),  # the same targets: the training plan serves evaluation too
    ("exact", "train", 2, 2),
])
def test_evaluation_plan_reuses_the_training_partition(monkeypatch, halo: str, targets: str,
                                                       partitions: int, plans: int) -> None:
    import pipegnn.microbatch.plan as plan_module
    from pipegnn.models.base import StagedGNN

    calls = {"partition": 0, "attach": 0}

    def counting(name, original):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(plan_module, "partition", counting("partition", plan_module.partition))
    monkeypatch.setattr(StagedGNN, "attach", counting("attach", StagedGNN.attach))
    record = run(make_cfg("chunks=3", f"microbatch.halo={halo}", f"microbatch.targets={targets}",
                          "microbatch.cache=null"))
    assert record["status"] == "completed", record["error"]
    assert (calls["partition"], calls["attach"]) == (partitions, plans)


def test_early_stopping_records_the_stopped_epoch() -> None:
    """With lr=0 the model never changes, so validation accuracy never beats epoch 0: patience 2 stops
    after epoch 2."""
    record = run(make_cfg("train.epochs=10", "train.lr=0", "train.patience=2"))
    assert record["status"] == "completed", record["error"]
    assert [e["epoch"] for e in record["epochs"]] == [0, 1, 2]
    assert record["final"]["stopped_epoch"] == 2 and record["final"]["best_epoch"] == 0
    full = run(make_cfg("train.epochs=3", "train.patience=5"))["final"]
    assert full["stopped_epoch"] is None


def test_monitor_picks_the_best_epoch_by_validation_loss() -> None:
    """train.monitor=val_loss: every epoch records the validation cross-entropy, training lowers it, and
    the best epoch is the first with the lowest one (as GCNII selects)."""
    record = run(make_cfg("train.epochs=12", "train.monitor=val_loss"))
    assert record["status"] == "completed", record["error"]
    epochs, final = record["epochs"], record["final"]
    losses = [e["val_loss"] for e in epochs]
    assert all(math.isfinite(v) and v > 0 for v in losses) and min(losses) < losses[0]
    lowest = losses.index(min(losses))
    assert (final["monitor"], final["best_epoch"], final["best_val_loss"]) == \
        ("val_loss", lowest, min(losses))
    assert final["test_acc_at_best_val"] == epochs[lowest]["test_acc"]
    assert final["best_val_acc"] == epochs[lowest]["val_acc"]


def test_patience_waits_on_the_monitor() -> None:
    """Patience on val_loss stops at the first epoch that is ``patience`` epochs past the lowest loss so
    far (recomputed from the record's own losses); with lr=0 the loss never falls below epoch 0's, so
    patience 2 stops after epoch 2."""
    record = run(make_cfg("train.epochs=40", "train.patience=3", "train.monitor=val_loss"))
    losses = [e["val_loss"] for e in record["epochs"]]
    waits = [e - losses.index(min(losses[:e + 1])) for e in range(len(losses))]
    stop = next((e for e, waited in enumerate(waits) if waited >= 3), 39)
    assert len(losses) == stop + 1 and record["final"]["stopped_epoch"] == (stop if stop < 39 else None)
    record = run(make_cfg("train.epochs=10", "train.lr=0", "train.patience=2", "train.monitor=val_loss"))
    assert [e["epoch"] for e in record["epochs"]] == [0, 1, 2]
    assert record["final"]["stopped_epoch"] == 2 and record["final"]["best_epoch"] == 0


def test_record_has_time_to_accuracy() -> None:
    record = run(make_cfg("train.epochs=4", "train.target_val_acc=0.01"))
    tta = record["final"]["time_to_accuracy"]
    assert tta["epoch"] == 0 and tta["train_s"] == record["epochs"][0]["epoch_time_s"]
    from pipegnn.results import flatten

    row = flatten(record)
    assert (row["tta_epoch"], row["tta_train_s"], row["tta_target_val_acc"]) == (0, tta["train_s"], 0.01)
    # wall time: from the run's start (set-up and the first evaluation included) to epoch 0's end
    first, started = record["epochs"][0], record["timing"]["started_at"]
    assert first["epoch_time_s"] + first["eval_time_s"] < tta["wall_s"] == first["ended_at"] - started < \
        record["timing"]["total_s"]
    best = record["final"]["time_to_best"]
    assert best["wall_s"] == record["epochs"][best["epoch"]]["ended_at"] - started == row["best_wall_s"]
    assert row["tta_wall_s"] == tta["wall_s"]
    assert math.isnan(row["stopped_epoch"]) and row["best_epoch"] == record["final"]["best_epoch"]


def test_a_file_beside_the_record_never_costs_it(tmp_path: Path) -> None:
    """The record is written first and alone: a folder where the trace goes (the example) or where a
    tracker writes its last file (a second case) leaves a completed record that names each failure."""
    out = tmp_path / "run"
    (out / "trace.json").mkdir(parents=True)
    (out / "csv" / "final.csv").mkdir(parents=True)
    record = run(make_cfg("train.epochs=2", "engine.trace_epoch=1", "logger=csv"), output_dir=out)
    assert record["status"] == "completed", record["error"]
    written = json.loads((out / "result.json").read_text())
    assert written["status"] == "completed" and [e["epoch"] for e in written["epochs"]] == [0, 1]
    assert sorted(written["unwritten"]) == ["logger csv", "trace.json"]
    assert written["unwritten"]["trace.json"].startswith("IsADirectoryError")
    assert "final.csv" in written["unwritten"]["logger csv"]
    assert "trace" not in (written.get("pipeline") or {})


@pytest.mark.parametrize("logger, setting", [
    ("csv", "logger.csv.dir=result.json"), ("csv", "microbatch.cache={out}/result.json/plans"),
    ("mlflow", "logger.mlflow.tracking_uri=file://{out}/result.json"),  # found by probing again
])
def test_no_folder_of_a_run_takes_its_records_place(tmp_path: Path, logger: str, setting: str) -> None:
    """A tracker's folder named result.json (the example), a cache inside RUN/result.json (a second case)
    or an MLflow file store there trained every epoch and lost the record; each is one ``invalid`` record
    naming the setting, before any epoch, in the record's file."""
    out = tmp_path / "run"
    setting = setting.format(out=out)
    record = run(make_cfg("train.epochs=2", f"logger={logger}", setting), output_dir=out)
    assert record["status"] == "invalid" and not record["epochs"], record["error"]
    assert f"{setting} would make a folder where the run's record goes" in record["error"]
    assert json.loads((out / "result.json").read_text())["status"] == "invalid"


@pytest.mark.parametrize("overrides", [("engine=single", "chunks=4"),
                                       ("engine=gpipe", "chunks=2", "microbatch.halo=historical")])
def test_build_gives_the_pieces_a_run_trains(overrides: tuple[str, ...]) -> None:
    """``pipegnn.build`` builds what a run builds before its first epoch: one training step of its pieces
    gives the loss of the run's first epoch (dropout 0, the same seed), and a bad config is refused as a run
    refuses it."""
    cfg = make_cfg("model.dropout=0", *overrides)
    trainee = build(cfg)
    if trainee.training.plan.halo == "historical":  # as the run fills the caches before its first step
        trainee.model.eval()
        trainee.engine.refresh(trainee.model, trainee.evaluation.ids)
    trainee.model.train()
    trainee.model.tick()
    loss = trainee.engine.train_step(trainee.training.ids, *trainee.train_labels())
    record = run(cfg)
    assert record["status"] == "completed", record["error"]
    assert math.isclose(loss, record["epochs"][0]["train_loss"], rel_tol=1e-6)
    with pytest.raises(ConfigError, match="chunks must be an integer >= 1, got 0"):
        build(make_cfg("chunks=0"))
