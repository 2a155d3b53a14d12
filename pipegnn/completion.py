"""What a ``completed`` record holds: [`completion_problem`][pipegnn.completion.completion_problem], which
[`record_of`][pipegnn.results.record_files.record_of] applies to every record file and archive line, and
[`epochs_problem`][pipegnn.completion.epochs_problem], which a checkpoint's epochs pass too.

A record read from a file is ``completed`` only when its fields say so: at least one epoch, each accuracy
of ``final`` (`COMPLETED_ACCURACIES`), and every epoch's ``train_acc``, ``val_acc`` and ``test_acc``, each a
number from 0 to 1, and all of ``train.epochs``' epochs unless it stopped early (``final.stopped_epoch``). A
``completed`` record without them is malformed (the runs table lists it as ``unreadable``, and
``resume=true`` runs its job again).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pipegnn.run_record import RunRecord, Status, json_kind

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


#: The accuracies every completed run's ``final`` holds (what the runs table and the reports read).
COMPLETED_ACCURACIES = ("train_acc", "val_acc", "test_acc", "best_val_acc", "test_acc_at_best_val")
#: The accuracies every epoch of a completed run holds.
_EPOCH_ACCURACIES = ("train_acc", "val_acc", "test_acc")


def _accuracy_problem(value: Any) -> str | None:
    """Why ``value`` is no accuracy (a number from 0 to 1; NaN is none), None when it is one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"is {json_kind(value)}, expected a number from 0 to 1"
    if not 0 <= value <= 1:  # NaN fails too
        return f"is {value!r}, expected a number from 0 to 1"
    return None


def completion_problem(record: RunRecord) -> str | None:
    """Why ``record``, whose status is ``completed``, does not hold what a completed run writes (None
    when it does, or when its status is another): no epoch, or an accuracy of ``final``
    (`COMPLETED_ACCURACIES`) or of any epoch (``train_acc``, ``val_acc``, ``test_acc``) that is absent or no
    number from 0 to 1. Phrased as
    [`RecordFormatError`][pipegnn.run_record.RecordFormatError]'s reasons are (``malformed record: ...``)."""
    if record.status is not Status.COMPLETED:
        return None
    if not record.epochs:
        return "malformed record: status 'completed' but no epochs"
    for key in COMPLETED_ACCURACIES:
        if key not in record.final:
            return f"malformed record: status 'completed' but no 'final.{key}'"
        problem = _accuracy_problem(record.final[key])
        if problem is not None:
            return f"malformed record: status 'completed' but 'final.{key}' {problem}"
    problem = epochs_problem(record.epochs)
    if problem is not None:
        return f"malformed record: status 'completed' but {problem}"
    planned = (record.config.get("train") or {}).get("epochs") if isinstance(record.config, Mapping) else None
    if (isinstance(planned, int) and not isinstance(planned, bool) and len(record.epochs) < planned
            and record.final.get("stopped_epoch") is None):
        return (f"malformed record: status 'completed' but {len(record.epochs)} of train.epochs={planned} "
                "epochs and no early stop (final.stopped_epoch)")
    return None


def epochs_problem(epochs: Sequence[Any], keys: Sequence[str] = _EPOCH_ACCURACIES) -> str | None:
    """Why ``epochs`` (a record's or a checkpoint's) are not what a run writes (None when they are): an
    entry that is no object, or lacks one of ``keys`` (the accuracies, by default), or holds there no
    number from 0 to 1 (an accuracy, ``*_acc``) or no finite number (the others: losses, times)."""
    for i, epoch in enumerate(epochs):
        if not isinstance(epoch, Mapping):
            return f"'epochs[{i}]' is {json_kind(epoch)}, expected an object"
        for key in keys:
            if key not in epoch:
                return f"no 'epochs[{i}].{key}'"
            value = epoch[key]
            if key.endswith("_acc"):
                problem = _accuracy_problem(value)
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                problem = f"is {value!r}, expected a finite number"
            else:
                problem = None
            if problem is not None:
                return f"'epochs[{i}].{key}' {problem}"
    return None
