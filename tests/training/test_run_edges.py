"""Smaller holes of a run's edges: a checkpoint path that is a folder, a hydra.run.dir that is a file,
a dataset seed out of range, a resumed run's trace, a signal during a checkpoint's save."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipegnn import run
from pipegnn.training import checkpoints
from pipegnn.training import epochs as epochs_module
from pipegnn.training.checkpoints import checkpoint_path, load
from pipegnn.training.preemption import Interrupted

from tests.helpers import ROOT, TINY_SYNTHETIC, make_cfg


@pytest.mark.parametrize("engine, rank", [("single", 0), ("pipelining", 1)])
def test_a_folder_at_a_checkpoint_path_is_invalid_before_training(tmp_path: Path, engine: str,
                                                                  rank: int) -> None:
    """The issue's example (engine=single, rank 0's path) and a pipeline's rank 1: refused before epoch
    0, naming the path (it was found by the first save, after epoch 0)."""
    checkpoint_path(tmp_path, rank).mkdir()
    record = run(make_cfg(f"engine={engine}", "chunks=2", "train.checkpoint_every=1"), output_dir=tmp_path)
    assert record["status"] == "invalid", (record["status"], record["error"])
    assert f"checkpoint path {checkpoint_path(tmp_path, rank)} is a folder" in record["error"]
    assert record["epochs"] == []


def _cli(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *TINY_SYNTHETIC,
                           "train.epochs=1", "engine=single", *overrides], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("under", [False, True])
def test_a_run_dir_that_is_a_file_is_one_line(tmp_path: Path, under: bool) -> None:
    """hydra.run.dir naming a file (the issue's example) or a folder under a file: exit 1 with one line
    naming it, no traceback."""
    (tmp_path / "taken").write_text("a file")
    target = tmp_path / "taken" / "run" if under else tmp_path / "taken"
    proc = _cli(tmp_path, f"hydra.run.dir={target}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert f"hydra.run.dir={target} " in out and "a file, not a folder" in out, out[-3000:]
    assert "Traceback" not in out


@pytest.mark.parametrize("key, value", [("dataset.seed", 2**64), ("dataset.seed", -1)])
def test_a_dataset_seed_out_of_range_is_invalid(key: str, value: int) -> None:
    record = run(make_cfg(f"{key}={value}"))
    assert record["status"] == "invalid", (record["status"], record["error"])
    assert f"{key} must be an integer in [0, 2**63 - 1], got {value}" in record["error"]


@pytest.mark.parametrize("engine", ["single", "pipelining"])
def test_a_resumed_run_writes_its_trace(tmp_path: Path, engine: str) -> None:
    """The trace of engine.trace_epoch (1), recorded before the run stopped, is kept in the checkpoint
    and written by the resumed run."""
    cfg = [f"engine={engine}", "chunks=2", "model.dropout=0", "train.checkpoint_every=1"]
    run(make_cfg(*cfg, "train.epochs=2"), output_dir=tmp_path)
    (tmp_path / "trace.json").unlink()
    resumed = run(make_cfg(*cfg, "train.epochs=4", "resume=true"), output_dir=tmp_path)
    assert resumed["resumed"]["epochs_restored"] == 2
    assert resumed["pipeline"].get("trace") == "trace.json"
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["traceEvents"]


def _signal_inside(monkeypatch: pytest.MonkeyPatch, module, name: str, signum: int, at_epochs: int) -> None:
    """``module.name`` sends this process ``signum`` when called for a state of ``at_epochs`` epochs
    (inside a checkpoint's save), then goes on."""
    original = getattr(module, name)

    def wrapped(*args, **kwargs):
        epochs = next((a for a in args if isinstance(a, list)), None)
        state = next((a for a in args if isinstance(a, dict) and "epochs" in a), None)
        count = len(epochs if epochs is not None else state["epochs"] if state is not None else [])
        if count == at_epochs:
            os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)


@pytest.mark.parametrize("where", ["torch.save", "training_state"])
def test_a_signal_during_a_save_leaves_record_and_checkpoint_agreeing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """SIGTERM while torch.save writes the checkpoint after epoch 2 (the issue's example), SIGINT while
    the state is gathered for it: the run stops after the save, and the record's finished epochs are
    the checkpoint's."""
    if where == "torch.save":
        _signal_inside(monkeypatch, checkpoints.torch, "save", signal.SIGTERM, 3)
    else:
        _signal_inside(monkeypatch, epochs_module, "training_state", signal.SIGINT, 3)
    with pytest.raises(Interrupted):
        run(make_cfg("train.epochs=6", "train.checkpoint_every=1"), output_dir=tmp_path)
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "interrupted"
    held = len(load(checkpoint_path(tmp_path))["epochs"])
    assert record["interrupted"]["epochs_finished"] == len(record["epochs"]) == held == 3
