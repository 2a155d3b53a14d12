"""Completed records as a completed run leaves them, for the tests of pipegnn.results: a record with
``status: completed`` counts as completed only with an epoch and the final accuracies
(:func:`pipegnn.completion.completion_problem`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pipegnn.runs.record_writes import write_record

from tests.helpers import killed_variant_sweep

#: What a completed run's record holds besides its config: an epoch and the final accuracies.
FINISHED: dict[str, Any] = {
    "epochs": [{"epoch": 0, "train_acc": 1.0, "val_acc": 0.5, "test_acc": 0.25}],
    "final": {"train_acc": 1.0, "val_acc": 0.5, "test_acc": 0.25, "best_val_acc": 0.5,
              "test_acc_at_best_val": 0.25}}


def completed(config: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A completed record of ``config`` (``fields`` replace or add keys): as many epochs as its
    ``train.epochs`` (a completed run without an early stop trains them all), one when it has none."""
    planned = config.get("train", {}).get("epochs", 1) if isinstance(config, dict) else 1
    count = planned if isinstance(planned, int) else 1
    epochs = [{**FINISHED["epochs"][0], "epoch": e} for e in range(count)]
    return {"status": "completed", "config": config, **FINISHED, "epochs": epochs, **fields}


def killed_sweep(sweep: Path) -> Path:
    """:func:`tests.helpers.killed_variant_sweep`, its completed job's record a whole one (the helper's
    has no epochs, which no completed run leaves)."""
    killed_variant_sweep(sweep)
    write_record(sweep / "+variant=a,chunks=2", completed({"chunks": 2}, error=None))
    return sweep
