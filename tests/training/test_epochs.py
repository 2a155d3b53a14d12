"""pipegnn.training.epochs: the best epoch by either monitor; time to accuracy, counted over training time
only, to a configured or an own target."""
from __future__ import annotations

import pytest

from pipegnn.training.epochs import best_epoch, time_to_accuracy, wall_times


def test_best_epoch_is_the_first_with_the_best_monitor() -> None:
    """val_acc: the highest validation accuracy; val_loss: the lowest validation loss, which need not
    be the same epoch; ties go to the earliest."""
    epochs = [{"epoch": i, "val_acc": acc, "val_loss": loss}
              for i, (acc, loss) in enumerate([(0.5, 1.2), (0.8, 0.9), (0.8, 0.7), (0.7, 0.7)])]
    assert best_epoch(epochs)["epoch"] == best_epoch(epochs, "val_acc")["epoch"] == 1
    assert best_epoch(epochs, "val_loss")["epoch"] == 2


def test_time_to_accuracy_counts_training_time_only() -> None:
    epochs = [{"epoch": i, "val_acc": v, "epoch_time_s": 2.0, "eval_time_s": 100.0}
              for i, v in enumerate([0.2, 0.5, 0.7, 0.6, 0.8])]
    assert time_to_accuracy(epochs, 0.65) == {"target_val_acc": 0.65, "source": "config", "epoch": 2,
                                              "train_s": 6.0}
    assert time_to_accuracy(epochs, 0.9)["train_s"] is None
    own = time_to_accuracy(epochs)  # 0.98 x best (0.8) = 0.784: first reached at epoch 4
    assert own["source"] == "fraction_of_best" and own["target_val_acc"] == pytest.approx(0.784)
    assert (own["epoch"], own["train_s"]) == (4, 10.0)


def test_wall_times_count_from_the_runs_start_and_skip_restored_epochs() -> None:
    """The time to accuracy and to the best epoch in wall time: from the run's start to the end of that
    epoch (set-up and evaluations included); an epoch an earlier process trained (a resume) has none;
    the epochs are left as they were streamed."""
    epochs = [{"epoch": i, "val_acc": v, "val_loss": 1 - v, "epoch_time_s": 2.0, "ended_at": 100.0 + 3 * i}
              for i, v in enumerate([0.2, 0.5, 0.7, 0.6, 0.8, 0.79])]
    streamed = [dict(e) for e in epochs]
    final = {"monitor": "val_acc", "time_to_accuracy": time_to_accuracy(epochs)}  # reached at epoch 4
    wall_times(epochs, final, started_at=90.0)
    assert final["time_to_accuracy"]["wall_s"] == 22.0
    assert final["time_to_best"] == {"epoch": 4, "wall_s": 22.0, "train_s": 10.0}
    assert epochs == streamed
    final = {"monitor": "val_loss", "time_to_accuracy": time_to_accuracy(epochs, 0.5)}  # epoch 1
    wall_times(epochs, final, started_at=105.0)  # resumed: epochs 0-1 ended before this process started
    assert final["time_to_accuracy"]["wall_s"] is None
    assert final["time_to_best"]["epoch"] == 4 and final["time_to_best"]["wall_s"] == 7.0
