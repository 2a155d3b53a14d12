"""Every rank of a pipeline resumes from one point: the newest epoch all ranks' checkpoints hold (each
rank keeps its newest checkpoint and the one before it), or epoch 0 on every rank."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipegnn import run
from pipegnn.training.checkpoints import checkpoint_path, load, previous_path, save

from tests.helpers import make_cfg

#: A short deadline: today's code hung until it when ranks resumed from different epochs.
_PIPE = ["engine=pipelining", "chunks=2", "model.dropout=0", "train.checkpoint_every=1",
         "engine.timeout_s=60"]


def _losses(record: dict) -> list[float]:
    assert record["status"] == "completed", (record["error"], record.get("traceback"))
    return [e["train_loss"] for e in record["epochs"]]


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    return _losses(run(make_cfg(*_PIPE, "train.epochs=5"), output_dir=tmp_path_factory.mktemp("whole")))


def _older(path: Path) -> None:
    """As a kill before this rank's last save leaves it: its newest file is the one before."""
    shutil.copyfile(previous_path(path), path)
    previous_path(path).unlink()


@pytest.mark.parametrize("harm", ["damaged", "an epoch older", "missing"])
def test_pipeline_ranks_resume_from_one_epoch(tmp_path: Path, harm: str, whole: list[float]) -> None:
    """Rank 1's newest checkpoint damaged (truncated), an epoch older than rank 0's (a kill between the
    two ranks' saves), or gone: both ranks resume after epoch 1 (the newest both hold), and the run
    equals an uninterrupted one; rank 0's newer file is not mixed with a rank that started over."""
    run(make_cfg(*_PIPE, "train.epochs=3"), output_dir=tmp_path)
    rank1 = checkpoint_path(tmp_path, 1)
    assert len(load(rank1)["epochs"]) == 3 and len(load(previous_path(rank1))["epochs"]) == 2
    if harm == "damaged":
        rank1.write_bytes(rank1.read_bytes()[:100])
    elif harm == "an epoch older":
        _older(rank1)
    else:
        rank1.unlink()
    resumed = run(make_cfg(*_PIPE, "train.epochs=5", "resume=true"), output_dir=tmp_path)
    assert resumed["resumed"]["epochs_restored"] == 2, resumed["resumed"]
    assert _losses(resumed) == pytest.approx(whole, rel=1e-5)
    for rank in (0, 1):
        assert len(load(checkpoint_path(tmp_path, rank))["epochs"]) == 5


def test_ranks_with_no_epoch_in_common_all_start_over(tmp_path: Path, whole: list[float]) -> None:
    """Rank 1 without any checkpoint: every rank trains from epoch 0 (none resumes alone)."""
    run(make_cfg(*_PIPE, "train.epochs=3"), output_dir=tmp_path)
    for path in (checkpoint_path(tmp_path, 1), previous_path(checkpoint_path(tmp_path, 1))):
        path.unlink()
    resumed = run(make_cfg(*_PIPE, "train.epochs=5", "resume=true"), output_dir=tmp_path)
    assert "resumed" not in resumed
    assert _losses(resumed) == pytest.approx(whole, rel=1e-5)


def test_one_process_falls_back_to_the_checkpoint_before(tmp_path: Path) -> None:
    """engine=single: a damaged newest checkpoint costs one save's epochs, not the run."""
    cfg = ["model.dropout=0", "train.checkpoint_every=1"]
    whole = _losses(run(make_cfg(*cfg, "train.epochs=4"), output_dir=tmp_path / "whole"))
    run(make_cfg(*cfg, "train.epochs=2"), output_dir=tmp_path)
    path = checkpoint_path(tmp_path)
    path.write_bytes(path.read_bytes()[:100])
    resumed = run(make_cfg(*cfg, "train.epochs=4", "resume=true"), output_dir=tmp_path)
    assert resumed["resumed"] == {"checkpoint": str(previous_path(path)), "epochs_restored": 1}
    assert _losses(resumed) == whole


def test_save_keeps_the_one_before(tmp_path: Path) -> None:
    path = checkpoint_path(tmp_path)
    save(path, {"epochs": [1]}, keep_previous=True)
    assert not previous_path(path).exists()
    save(path, {"epochs": [1, 2]}, keep_previous=True)
    assert load(path)["epochs"] == [1, 2] and load(previous_path(path))["epochs"] == [1]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["checkpoint-rank0.previous.pt", "checkpoint-rank0.pt"]


def test_a_newest_file_that_does_not_fit_costs_one_save(tmp_path: Path, whole: list[float]) -> None:
    """Rank 1's newest file is rank 0's (it loads, it is sealed, its epochs agree, but its state does not
    fit rank 1's stages): the ranks agree again on the next common point, the files before, and resume
    after epoch 1, not from epoch 0; the file that does not fit is set aside."""
    run(make_cfg(*_PIPE, "train.epochs=3"), output_dir=tmp_path)
    rank1 = checkpoint_path(tmp_path, 1)
    shutil.copyfile(checkpoint_path(tmp_path, 0), rank1)
    resumed = run(make_cfg(*_PIPE, "train.epochs=5", "resume=true"), output_dir=tmp_path)
    assert resumed["resumed"]["epochs_restored"] == 2, resumed.get("resumed")
    assert _losses(resumed) == pytest.approx(whole, rel=1e-5)
    assert Path(f"{rank1}.unusable").is_file()


def test_a_folder_at_the_set_aside_name_is_passed_by(tmp_path: Path, whole: list[float]) -> None:
    """A folder where a damaged checkpoint would be set aside (``<file>.unusable``): it goes to the
    first free name (``<file>.unusable.1``) and the run resumes; the folder is left as it was."""
    run(make_cfg(*_PIPE, "train.epochs=3"), output_dir=tmp_path)
    rank1 = checkpoint_path(tmp_path, 1)
    rank1.write_bytes(rank1.read_bytes()[:100])
    Path(f"{rank1}.unusable").mkdir()
    resumed = run(make_cfg(*_PIPE, "train.epochs=5", "resume=true"), output_dir=tmp_path)
    assert resumed["resumed"]["epochs_restored"] == 2, (resumed["error"], resumed.get("resumed"))
    assert _losses(resumed) == pytest.approx(whole, rel=1e-5)
    assert Path(f"{rank1}.unusable").is_dir() and Path(f"{rank1}.unusable.1").is_file()
