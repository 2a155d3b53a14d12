"""Sweeps through the command line (experiments/train.py): failing jobs recorded while the sweep goes on,
named at its end and in the exit code, resume redoing only them, the joblib launcher, schema errors."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pipegnn import run
from pipegnn.results import load

from tests.helpers import TINY_SYNTHETIC, cli, make_cfg

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
                                                     "threads": None, "timeline": True, "trace_epoch": 1,
                                                     "capture": "none"}
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
    (A single run that fails exits non-zero too: tests/training/test_launch.py.)"""
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


@pytest.mark.slow  # make test-all; the joblib launcher's statuses stay in make test
def test_joblib_launcher_runs_pipelining_jobs(tmp_path: Path) -> None:
    """engine=pipelining in joblib's workers: a loky worker's default start method ('loky') is one a new
    interpreter cannot set, so the workers it starts failed ('cannot find context for loky')."""
    sweep = tmp_path / "sweep"
    proc = cli(tmp_path, "-m", *TINY_SYNTHETIC, "train.epochs=1", "engine=pipelining", "train.seed=0,1",
               "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert sorted(r["status"] for r in records) == ["completed", "completed"]
    assert all(r["workers"]["world_size"] == 2 for r in records)
