"""What a run's epochs say, once they are recorded: the ``final`` figures (the last and the best epoch's
accuracies, where it stopped early, the time to accuracy), the medians of the timed epochs, early stopping's
rule, and the wall times a user waits for, set-up included. Shared by pipegnn's epoch loop
([`pipegnn.training.epochs`][pipegnn.training.epochs]) and DGL's own loop
([`pipegnn.training.dgl_loader`][pipegnn.training.dgl_loader])."""
from __future__ import annotations

import statistics
from typing import Any

from pipegnn.config.checks import TTA_FRACTION
from pipegnn.config.choices import Monitor
from pipegnn.config.schema import TrainConfig
from pipegnn.run_record import RunRecord

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def final_figures(record: RunRecord, train_cfg: TrainConfig, timed_from: int) -> list[dict[str, Any]]:
    """The run's ``final`` figures (the last epoch's accuracies, the best epoch's by ``train.monitor``,
    where it stopped early, the time to accuracy) and the median epoch and evaluation times over the
    epochs from ``timed_from`` on (the ones before warm up); returns those epochs."""
    epochs, monitor = record.epochs, train_cfg.monitor
    best, last = best_epoch(epochs, monitor), epochs[-1]
    stopped = last["epoch"] if last["epoch"] + 1 < train_cfg.epochs else None
    record.final = {"train_acc": last["train_acc"], "val_acc": last["val_acc"],
                    "test_acc": last["test_acc"], "monitor": monitor, "best_val_acc": best["val_acc"],
                    "best_val_loss": best["val_loss"], "test_acc_at_best_val": best["test_acc"],
                    "best_epoch": best["epoch"],
                    "stopped_epoch": stopped,
                    "time_to_accuracy": time_to_accuracy(epochs, train_cfg.target_val_acc)}
    timed_epochs = epochs[timed_from:] or epochs
    record.timing.update(
        epoch_time_median_s=statistics.median(e["epoch_time_s"] for e in timed_epochs),
        eval_time_median_s=statistics.median(e["eval_time_s"] for e in timed_epochs))
    return timed_epochs


def stops(epochs: list[dict[str, Any]], patience: int | None, monitor: Monitor) -> bool:
    """Whether early stopping ends the run after the last of ``epochs``: ``patience`` epochs passed
    without a better ``monitor``."""
    return patience is not None and epochs[-1]["epoch"] - best_epoch(epochs, monitor)["epoch"] >= patience


def best_epoch(epochs: list[dict[str, Any]], monitor: Monitor | str = Monitor.val_acc) -> dict[str, Any]:
    """The first epoch with the best ``monitor``: the highest validation accuracy (``val_acc``) or the
    lowest validation loss (``val_loss``)."""
    if monitor == "val_loss":
        return min(epochs, key=lambda e: e["val_loss"])
    return max(epochs, key=lambda e: e["val_acc"])


def time_to_accuracy(epochs: list[dict[str, Any]], target: float | None = None) -> dict[str, Any]:
    """Training time (steps only, evaluation excluded) until validation accuracy first reaches
    ``target``, or `TTA_FRACTION` of the run's best when ``target`` is None.

    Returns ``{"target_val_acc", "source" ("config" | "fraction_of_best"), "epoch", "train_s"}``;
    ``epoch`` and ``train_s`` are None when the run never reached the target.
    """
    source = "config" if target is not None else "fraction_of_best"
    if target is None:
        target = TTA_FRACTION * max(e["val_acc"] for e in epochs)
    elapsed = 0.0
    for e in epochs:
        elapsed += e["epoch_time_s"]
        if e["val_acc"] >= target:
            return {"target_val_acc": target, "source": source, "epoch": e["epoch"], "train_s": elapsed}
    return {"target_val_acc": target, "source": source, "epoch": None, "train_s": None}


def wall_times(epochs: list[dict[str, Any]], final: dict[str, Any] | None, started_at: float) -> None:
    """Wall-clock times of a run that started (its process, or a pipeline's launcher) at ``started_at``
    (``time.time()``), set-up, evaluations and a pipeline's process start included, as a user waits for
    them, into ``final``: ``time_to_accuracy.wall_s`` and ``time_to_best`` (``epoch``, ``train_s`` and
    ``wall_s`` of the best epoch by ``final["monitor"]``), each from the start to the end of that epoch's
    evaluation (its ``ended_at``; the epochs themselves are left as they were streamed). An epoch a
    resumed run restored (trained by an earlier process) has no wall time: None."""
    if not final or not epochs:
        return

    def wall(e: dict[str, Any] | None) -> float | None:
        ended = None if e is None else e.get("ended_at")
        return ended - started_at if ended is not None and ended >= started_at else None

    tta = final.get("time_to_accuracy")
    if isinstance(tta, dict):
        tta["wall_s"] = wall(next((e for e in epochs if e["epoch"] == tta.get("epoch")), None))
    best = best_epoch(epochs, final.get("monitor", Monitor.val_acc))
    final["time_to_best"] = {"epoch": best["epoch"], "wall_s": wall(best),
                             "train_s": sum(e["epoch_time_s"] for e in epochs if e["epoch"] <= best["epoch"])}
