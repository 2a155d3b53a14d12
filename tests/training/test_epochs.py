"""pipegnn.training.epochs: the best epoch by either monitor; time to accuracy, counted over training time
only, to a configured or an own target."""
from __future__ import annotations

import pytest

from pipegnn.training.run_figures import best_epoch, time_to_accuracy, wall_times

from tests.helpers import run_no_dropout


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


@pytest.mark.parametrize("engine", ["single", "gpipe"])
def test_drawing_ahead_trains_as_drawing_in_series(engine: str) -> None:
    """``microbatch.draw_ahead``: epoch e+1's draw in a background thread gives the losses of drawing it
    at its epoch's start; the record keeps each draw's time and the step's wait for it."""
    sampled = (f"engine={engine}", "model=gcn", "chunks=3", "microbatch.halo=sampled",
               "microbatch.fanouts=[3,3]", "train.epochs=4")
    ahead = run_no_dropout(*sampled)
    series = run_no_dropout(*sampled, "microbatch.draw_ahead=false")
    for record in (ahead, series):
        assert record["status"] == "completed", record.get("error")
        assert record["microbatch"]["sample_stream"] == {"device": "cpu", "generator": "mt19937"}
    assert [e["train_loss"] for e in ahead["epochs"]] == [e["train_loss"] for e in series["epochs"]]
    assert len({e["sampled_edges"] for e in ahead["epochs"]}) > 1  # a new draw each epoch
    for e in series["epochs"][1:]:  # in series the step waits for the whole draw
        assert e["sample_wait_s"] == e["sample_s"] > 0
    assert all(0 <= e["sample_wait_s"] and e["sample_s"] > 0 for e in ahead["epochs"][1:])
    # the swap of the model's and engine's structures for each draw: timed, within the step
    assert ahead["epochs"][0]["replace_s"] == 0.0
    assert all(0 < e["replace_s"] + e["sample_wait_s"] < e["epoch_time_s"] for e in ahead["epochs"][1:])


def test_sampled_with_every_neighbour_trains_as_exact_halos() -> None:
    """Fan-outs of -1 through the trainer (every epoch redrawn, ahead): exact halos' losses."""
    common = ("model=gcn", "chunks=3", "train.epochs=3")
    sampled = run_no_dropout(*common, "microbatch.halo=sampled", "microbatch.fanouts=[-1,-1]")
    exact = run_no_dropout(*common, "microbatch.halo=exact")
    assert sampled["epochs"][-1]["sampled_edges"] == sum(exact["microbatch"]["edges_per_layer"])
    assert [e["train_loss"] for e in sampled["epochs"]] == pytest.approx(
        [e["train_loss"] for e in exact["epochs"]], rel=1e-5)
