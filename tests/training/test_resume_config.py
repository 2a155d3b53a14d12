"""A checkpoint's configuration covers what changes the computation: settings that do not (where data
and caches are spelt, checkpoints, deadlines, caps, trackers, the trace) never throw it away, and a
checkpoint of another computation is set aside with a warning naming the keys that differ."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipegnn import run

from tests.helpers import make_cfg

_CFG = ["model.dropout=0", "train.checkpoint_every=1"]


def _resumes(tmp_path: Path, first: list[str], then: list[str]) -> dict:
    run(make_cfg(*_CFG, "train.epochs=2", *first), output_dir=tmp_path)
    record = run(make_cfg(*_CFG, "train.epochs=3", "resume=true", *then), output_dir=tmp_path)
    assert record["status"] == "completed", record["error"]
    return record


@pytest.mark.parametrize("first, then", [
    # the examples: PIPEGNN_DATA with a trailing slash, another checkpoint_every, timeout_s
    (["data.root={d}/data"], ["data.root={d}/data/"]),
    (["train.checkpoint_every=1"], ["train.checkpoint_every=2"]),
    (["engine=pipelining", "chunks=2"], ["engine=pipelining", "chunks=2", "engine.timeout_s=300"]),
    (["train.memory_limit_gb=8"], ["train.target_val_acc=0.5"]),
    # not named there: the data folder by a relative path, the trace's epoch, the plan cache, the monitor
    (["data.root={d}/data"], ["data.root=./{rel}/../{rel}/data"]),
    (["engine.trace_epoch=1"], ["engine.trace_epoch=0", "engine.timeline=false"]),
    ([], ["microbatch.cache={d}/other-plans", "train.patience=50", "train.monitor=val_loss"]),
    # a generated graph never reads data.root; auto is gloo on CPU; a feature file holds the same numbers
    (["data.root={d}/data"], ["data.root={d}/elsewhere"]),
    (["engine=pipelining", "chunks=2", "engine.backend=gloo"], ["engine=pipelining", "chunks=2"]),
    (["data.features=disk", "data.cache={d}/cache"], ["data.features=memory", "data.cache={d}/cache"]),
    (["data.edges=memory"], ["data.edges=disk", "data.cache={d}/cache"]),  # the same blocks from disk
    # the feature reads' means over the epochs that read the file (it failed after training, every resume)
    (["data.features=memory", "data.cache={d}/cache"], ["data.features=disk", "data.cache={d}/cache"]),
])
def test_settings_that_do_not_change_training_keep_the_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: list[str], then: list[str]) -> None:
    monkeypatch.chdir(tmp_path.parent)
    (tmp_path / "data").mkdir()
    fill = {"d": str(tmp_path), "rel": tmp_path.name}
    record = _resumes(tmp_path, [o.format(**fill) for o in first], [o.format(**fill) for o in then])
    assert record["resumed"]["epochs_restored"] == 2, "the checkpoint was not resumed"
    if "data.features=disk" in then:  # the one epoch that read the file
        reads = record["epochs"][-1]["feature_reads"]
        assert record["features"]["train_bytes_mean"] == reads["train_bytes"] > 0


@pytest.mark.parametrize("first, then, named", [
    (["train.lr=0.01"], ["train.lr=0.02"], "train.lr=0.01 in it, 0.02 now"),
    (["model.hidden=8"], ["model.hidden=4", "chunks=2"],
     "chunks=4 in it, 2 now, model.hidden=8 in it, 4 now"),
    # sparse features round otherwise than dense ones (the exactness tests): still a difference
    (["data.features=memory"], ["data.features=sparse"], "data.features='dense' in it, 'sparse' now"),
])
def test_another_computation_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture, first: list[str],
                                      then: list[str], named: str) -> None:
    record = _resumes(tmp_path, first, then)
    assert "resumed" not in record
    assert f"made with another configuration: {named}" in caplog.text
