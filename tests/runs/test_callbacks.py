"""The callbacks of experiments/train.py (pipegnn/runs/callbacks.py): the end-of-sweep failure summary
and its exit code, the progress bar over epochs. (Whole sweeps through the command line: test_sweeps.py.)"""
from __future__ import annotations

import io
import logging
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipegnn import run
from pipegnn.runs.callbacks import EpochProgress, FailureSummary, exit_code

from tests.helpers import make_cfg
from tests.results.completed import killed_sweep


def test_failure_summary_names_the_jobs_a_killed_sweep_left_without_a_record(tmp_path: Path) -> None:
    sweep = killed_sweep(tmp_path / "sweep")
    FailureSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    assert exit_code() == 1
    log = (sweep / "sweep.log").read_text()
    assert "4 jobs: 1 completed, 1 incomplete, 1 missing, 1 unreadable" in log
    assert "job 1 [chunks=2 +variant=b] incomplete: no result.json" in log
    assert "job 3 [chunks=4 +variant=b] missing: never started" in log
    FailureSummary().on_multirun_start(OmegaConf.create({}))
    assert exit_code() == 0


def test_a_sweep_whose_folder_cannot_be_read_at_its_end_exits_1(tmp_path: Path) -> None:
    """A tree past the walk's depth in the sweep's folder (a job's, grown while it ran) made the summary's
    reading of the sweep raise inside Hydra's callback (a warning), and the sweep exited 0; it says so
    and exits 1."""
    from tests.test_folder_walk import _deep, _remove_deep

    sweep = killed_sweep(tmp_path / "sweep")
    FailureSummary().on_multirun_start(OmegaConf.create({}))
    _deep(sweep / "tree", 70)
    try:
        FailureSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    finally:
        _remove_deep(sweep / "tree")
    assert exit_code() == 1
    assert "its jobs cannot be read: " in (sweep / "sweep.log").read_text()
    FailureSummary().on_multirun_start(OmegaConf.create({}))
    assert exit_code() == 0


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_follows_the_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar advances with each finished epoch ``run`` hands to ``on_epoch``; the per-epoch log lines
    stay off the terminal while it runs and come back after."""
    from pipegnn.training.epochs import EPOCH_LINE

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
