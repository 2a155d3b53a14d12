"""A run that early stopping ended stays ended when it is resumed: no epoch more, the same figures."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipegnn import run

from tests.helpers import make_cfg


@pytest.mark.parametrize("overrides", [
    ("train.monitor=val_acc",),  # the default monitor, the default learning rate: stops after epoch 8
    ("train.monitor=val_loss", "train.lr=0.2"),  # validation loss rising from epoch 0
])
def test_resume_does_not_train_past_an_early_stop(tmp_path: Path, overrides: tuple) -> None:
    cfg = ["model.dropout=0", "train.checkpoint_every=1", "train.epochs=60", "train.patience=3", *overrides]
    stopped = run(make_cfg(*cfg), output_dir=tmp_path)
    assert stopped["status"] == "completed", stopped["error"]
    assert stopped["final"]["stopped_epoch"] == len(stopped["epochs"]) - 1 < 59
    resumed = run(make_cfg(*cfg, "resume=true"), output_dir=tmp_path)
    assert resumed["status"] == "completed", resumed["error"]
    assert resumed["resumed"]["epochs_restored"] == len(stopped["epochs"])
    assert [e["train_loss"] for e in resumed["epochs"]] == [e["train_loss"] for e in stopped["epochs"]]
    for key in ("test_acc", "test_acc_at_best_val", "best_epoch", "stopped_epoch"):
        assert resumed["final"][key] == stopped["final"][key], key
