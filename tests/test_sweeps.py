"""Sweeps that never lose a result: failure capture, exit codes, resume, launchers, progress."""
from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipegnn import run
from pipegnn.results import load, write_record
from pipegnn.sweep import EpochProgress, FailureSummary, completed_record, exit_code, planned_jobs, sweep_jobs

from conftest import TINY_SYNTHETIC, cli, make_cfg

# Four jobs of one sweep, one per variant (a config group added from a test folder): two that complete,
# one invalid (31 chunks, the tiny graph has 30 training targets) and one that diverges mid-training
# (lr 1e30: the loss is NaN at epoch 1, so the trainer raises FloatingPointError).
VARIANTS = {
    "exact": "chunks: 2\nmicrobatch:\n  halo: exact\n",
    "naive": "chunks: 2\nmicrobatch:\n  halo: none\n",
    "too_many_chunks": "chunks: 31\n",
    "diverging": "chunks: 2\ntrain:\n  lr: 1.0e30\n",
}
EXPECTED = {"exact": "completed", "naive": "completed", "too_many_chunks": "invalid", "diverging": "failed"}
INVALID_MESSAGE = "chunks=31 is larger than the number of training targets (30)"
NAN_MESSAGE = "FloatingPointError: training loss is nan at epoch 1"


@pytest.fixture
def variants(tmp_path: Path) -> Path:
    folder = tmp_path / "extra_conf" / "variant"
    folder.mkdir(parents=True)
    for name, body in VARIANTS.items():
        (folder / f"{name}.yaml").write_text(f"# @package _global_\n{body}")
    return folder.parent


def _sweep(tmp_path: Path, variants: Path, sweep: Path, *extra: str) -> subprocess.CompletedProcess:
    return cli(tmp_path, "-m", *TINY_SYNTHETIC, "train.epochs=2", "devices=cpu2",
                f"+variant={','.join(VARIANTS)}", f"hydra.searchpath=[file://{variants}]",
                f"hydra.sweep.dir={sweep}", *extra)


def _records(sweep: Path) -> dict[str, dict]:
    """Records by variant name (the job's choice of the variant group)."""
    out = {}
    for path in sweep.glob("*/result.json"):
        record = json.loads(path.read_text())
        out[record["choices"]["variant"]] = record
    return out


def _check_failures_named(text: str, sweep: Path) -> None:
    summary = text[text.index(f"sweep {sweep}: 4 jobs"):]
    assert "4 jobs: 2 completed" in summary and "1 failed" in summary and "1 invalid" in summary
    assert "job 2 [" in summary and "+variant=too_many_chunks" in summary
    assert f"] invalid: {INVALID_MESSAGE}" in summary
    assert "job 3 [" in summary and "+variant=diverging" in summary
    assert f"] failed: {NAN_MESSAGE}" in summary
    assert "+variant=exact] " not in summary and "+variant=naive] " not in summary


def test_failing_jobs_are_recorded_the_sweep_goes_on_and_resume_redoes_only_them(
        tmp_path: Path, variants: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = _sweep(tmp_path, variants, sweep)
    assert proc.returncode == 1, proc.stderr[-3000:]
    records = _records(sweep)
    assert {v: r["status"] for v, r in records.items()} == EXPECTED
    assert INVALID_MESSAGE in records["too_many_chunks"]["error"]
    assert records["too_many_chunks"]["epochs"] == []
    assert records["diverging"]["error"] == NAN_MESSAGE
    assert "raise FloatingPointError" in records["diverging"]["traceback"]
    assert len(records["diverging"]["epochs"]) == 1  # epoch 0 trained, epoch 1 diverged
    for name in ("exact", "naive"):
        assert len(records[name]["epochs"]) == 2 and records[name]["final"]["test_acc"] >= 0
        assert records[name]["choices"]["devices"] == "cpu2"
        assert records[name]["config"]["engine"] == {"name": "gpipe", "devices": ["cpu", "cpu"],
                                                     "balance": None, "checkpoint": "except_last",
                                                     "timeline": True, "trace_epoch": 1}
    df = load(sweep)
    assert len(df) == 4 and sorted(df["status"]) == ["completed", "completed", "failed", "invalid"]
    # The failures are named on stderr and in the sweep's log: number, overrides, status, error.
    _check_failures_named(proc.stderr, sweep)
    _check_failures_named((sweep / "sweep.log").read_text(), sweep)

    # Same command with resume=true: the completed jobs are skipped, the other two run again.
    mtimes = {v: (sweep / str(i) / "result.json").stat().st_mtime_ns for i, v in enumerate(VARIANTS)}
    again = _sweep(tmp_path, variants, sweep, "resume=true")
    assert again.returncode == 1, again.stderr[-3000:]
    log = again.stdout
    assert "job 0 skipped: completed" in log and "job 1 skipped: completed" in log
    assert "job 2 resume: running (previous record is invalid)" in log
    assert "job 3 resume: running (previous record is failed)" in log
    assert log.count("skipped: completed") == 2
    after = {v: (sweep / str(i) / "result.json").stat().st_mtime_ns for i, v in enumerate(VARIANTS)}
    assert [v for v in VARIANTS if after[v] != mtimes[v]] == ["too_many_chunks", "diverging"]
    assert {v: r["status"] for v, r in _records(sweep).items()} == EXPECTED
    assert "2 completed (2 skipped by resume), 1 failed, 1 invalid" in again.stderr
    _check_failures_named(again.stderr, sweep)
    assert len(load(sweep)) == 4


def test_joblib_launcher_gives_the_same_statuses(tmp_path: Path, variants: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = _sweep(tmp_path, variants, sweep, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in proc.stdout
    records = _records(sweep)
    assert {v: r["status"] for v, r in records.items()} == EXPECTED
    assert records["diverging"]["error"] == NAN_MESSAGE
    assert INVALID_MESSAGE in records["too_many_chunks"]["error"]
    _check_failures_named(proc.stderr, sweep)


def test_cli_rejects_schema_errors(tmp_path: Path) -> None:
    """experiments/train.py registers the schemas: a wrong type stops the command at composition.
    (A single run that fails exits non-zero too: tests/test_train.py.)"""
    bad = cli(tmp_path, "chunks=abc", f"hydra.run.dir={tmp_path / 'bad'}")
    assert bad.returncode == 1
    assert "Error merging override chunks=abc" in bad.stderr
    assert "could not be converted to Integer" in bad.stderr
    assert not (tmp_path / "bad").exists()  # composition fails before any job


def test_lr_1e30_really_diverges() -> None:
    """The failure the sweep tests rely on is real: the trainer raises on the NaN loss."""
    record = run(make_cfg("train.lr=1e30", "train.epochs=3", "chunks=2"))
    assert record["status"] == "failed" and record["error"] == NAN_MESSAGE
    assert record["epochs"][0]["train_loss"] == pytest.approx(1.1, abs=0.2)


# --- resume -----------------------------------------------------------------------------------------

def _container(*overrides: str) -> dict:
    return OmegaConf.to_container(make_cfg(*overrides), resolve=True)


def test_resume_keeps_only_a_completed_record_of_the_same_config(tmp_path: Path) -> None:
    cfg = _container("chunks=2")
    assert completed_record(tmp_path, cfg) == (None, "no previous record")
    write_record(tmp_path, {"status": "failed", "config": cfg, "error": "boom"})
    assert completed_record(tmp_path, cfg) == (None, "previous record is failed")
    write_record(tmp_path, {"status": "completed", "config": cfg})
    record, reason = completed_record(tmp_path, cfg)
    assert record is not None and reason == "completed"
    # resume itself is volatile: a record made with resume=false is kept by a resume=true run
    assert completed_record(tmp_path, {**cfg, "resume": True})[0] is not None
    # the job's own output dir inside a path (a timestamped path) does not count as a change
    inside = {**cfg, "data": {**cfg["data"], "cache": f"{tmp_path}/cache"}}
    write_record(tmp_path, {"status": "completed", "config": inside})
    assert completed_record(tmp_path, inside)[0] is not None
    write_record(tmp_path, {"status": "completed", "config": cfg})
    record, reason = completed_record(tmp_path, _container("chunks=4"))
    assert record is None and reason == "config changed since the completed record: chunks: 2 -> 4"
    # a record older than a key that this config leaves null (a later option's default) is kept
    older = {**cfg, "train": {k: v for k, v in cfg["train"].items() if k != "checkpoint_every"}}
    write_record(tmp_path, {"status": "completed", "config": older})
    assert cfg["train"]["checkpoint_every"] is None and completed_record(tmp_path, cfg)[0] is not None
    assert completed_record(tmp_path, _container("chunks=2", "train.checkpoint_every=5"))[0] is None
    (tmp_path / "result.json").write_text("{not json")
    assert completed_record(tmp_path, cfg)[1].startswith("previous record unreadable")


def test_sweep_jobs_ignores_jobs_of_an_older_sweep(tmp_path: Path) -> None:
    marker = tmp_path / "multirun.yaml"  # what the sweeper writes before its first job
    marker.write_text("")
    since = marker.stat().st_mtime
    for job, status in ((0, "completed"), (1, "failed")):
        write_record(tmp_path / str(job), {"status": status, "error": "E: x\nmore" if job else None})
    os.utime(tmp_path / "1" / "result.json", (since - 10, since - 10))  # left from an older sweep
    jobs = sweep_jobs(tmp_path)
    assert [(j.num, j.status, j.error) for j in jobs] == [(0, "completed", None), (1, "failed", "E: x")]
    assert [j.num for j in sweep_jobs(tmp_path, since)] == [0]


def _killed_sweep(sweep: Path) -> Path:
    """A sweep of 4 jobs (chunks=2,4 x +variant=a,b) in folders named by their overrides, killed during
    job 2: job 0 completed, job 1 started and left no record, job 2 left a malformed one, job 3 never
    started. Its multirun.yaml (written by the basic sweeper before the first job) is older than the jobs."""
    params = [["chunks=2", "+variant=a"], ["chunks=2", "+variant=b"], ["chunks=4", "+variant=a"],
              ["chunks=4", "+variant=b"]]
    sweep.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create({"chunks": 4, "dataset": {"name": "synthetic"}, "hydra": {
        "sweep": {"dir": str(sweep), "subdir": "${hydra.job.override_dirname}"},
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "overrides": {"task": ["chunks=2,4", "+variant=a,b"]},
        "job": {"num": "???", "id": "???", "override_dirname": "chunks=2,4,+variant=a,b",
                "config": {"override_dirname": {"kv_sep": "=", "item_sep": ",", "exclude_keys": []}}},
        "runtime": {"choices": {"dataset": "synthetic", "hydra/launcher": "basic"}}}}), sweep / "multirun.yaml")
    old = (sweep / "multirun.yaml").stat().st_mtime - 5
    os.utime(sweep / "multirun.yaml", (old, old))
    for num, overrides in enumerate(params[:3]):
        job = sweep / ",".join(sorted(overrides))
        (job / ".hydra").mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(overrides), job / ".hydra" / "overrides.yaml")
        OmegaConf.save(OmegaConf.create({"chunks": 2 if num < 2 else 4}), job / ".hydra" / "config.yaml")
        OmegaConf.save(OmegaConf.create({"hydra": {"job": {"num": num}}}), job / ".hydra" / "hydra.yaml")
    write_record(sweep / "+variant=a,chunks=2", {"status": "completed", "error": None})
    write_record(sweep / "+variant=a,chunks=4", {"status": "completed", "final": []})
    return sweep


def test_sweep_jobs_name_the_jobs_a_killed_sweep_left_without_a_record(tmp_path: Path) -> None:
    sweep = _killed_sweep(tmp_path / "sweep")
    dirs = ["+variant=a,chunks=2", "+variant=b,chunks=2", "+variant=a,chunks=4", "+variant=b,chunks=4"]
    assert planned_jobs(sweep) == [(o.split(","), sweep / d) for o, d in zip(
        ["chunks=2,+variant=a", "chunks=2,+variant=b", "chunks=4,+variant=a", "chunks=4,+variant=b"], dirs)]
    assert planned_jobs(tmp_path) is None  # no multirun.yaml
    since = (sweep / "multirun.yaml").stat().st_mtime
    jobs = sweep_jobs(sweep, since)
    assert [(j.num, j.directory, j.status) for j in jobs] == [
        (0, sweep / dirs[0], "completed"), (1, sweep / dirs[1], "incomplete"), (2, sweep / dirs[2], "unreadable"),
        (3, sweep / dirs[3], "missing")]
    assert jobs[1].error.startswith("no result.json") and jobs[1].config == {"chunks": 2}
    assert jobs[2].error == "malformed record: 'final' is an array, expected an object"
    assert jobs[3].error == "never started: job 3 of the sweep (chunks=4 +variant=b)"
    assert (jobs[3].config, jobs[3].choices) == ({"chunks": 4}, {"variant": "b"})
    # jobs of an older sweep in the same folder do not stand for this one's
    later = since + 100
    os.utime(sweep / "multirun.yaml", (later, later))
    assert [j.status for j in sweep_jobs(sweep, later)] == ["missing"] * 4

    os.utime(sweep / "multirun.yaml", (since, since))
    FailureSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    assert exit_code() == 1
    log = (sweep / "sweep.log").read_text()
    assert "4 jobs: 1 completed, 1 incomplete, 1 missing, 1 unreadable" in log
    assert "job 1 [chunks=2 +variant=b] incomplete: no result.json" in log
    assert "job 3 [chunks=4 +variant=b] missing: never started" in log
    FailureSummary().on_multirun_start(OmegaConf.create({}))
    assert exit_code() == 0


def test_resume_reruns_a_malformed_record(tmp_path: Path) -> None:
    cfg = _container("chunks=2")
    write_record(tmp_path, {"status": "completed", "config": cfg, "epochs": 3})
    record, reason = completed_record(tmp_path, cfg)
    assert record is None
    assert reason == "previous record unreadable (malformed record: 'epochs' is a number, expected an array)"


# --- progress -----------------------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_follows_the_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar advances with each finished epoch ``run`` hands to ``on_epoch``; the per-epoch log lines
    stay off the terminal while it runs and come back after."""
    from pipegnn.train import EPOCH_LINE

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    console = logging.StreamHandler(term)
    root = logging.getLogger()
    root.addHandler(console)
    logger = logging.getLogger("pipegnn.train")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with EpochProgress(3, enabled=True, desc="job 7") as progress:
            record = run(make_cfg("train.epochs=3"), on_epoch=progress)
        assert record["status"] == "completed", record["error"]
        logger.info("epoch %3d  after", 9, extra=EPOCH_LINE)  # the bar is gone: lines reach the console
        with EpochProgress(3, enabled=False) as off:
            off({"epoch": 0, "train_loss": 1.0, "val_acc": 0.5})
    finally:
        root.removeHandler(console)
        logger.setLevel(level)
    text = term.getvalue()
    last = record["epochs"][-1]
    assert "job 7: 100%" in text and "3/3" in text
    assert f"loss={last['train_loss']:.4f}, val={last['val_acc']:.3f}" in text
    assert "epoch   0  loss" not in text  # muted on the terminal while the bar ran
    assert "done: test acc" in text and "epoch   9  after" in text
    assert console.filters == []


# --- presets -------------------------------------------------------------------------------------------
