"""engine=dgl_loader: DGL's own sampled loop trains the run's model at its widths, writes the record every
run writes, and refuses what it cannot run before it loads anything."""
from __future__ import annotations

import pytest

from tests.helpers import make_cfg, run_no_dropout

LOADER = ("engine=dgl_loader", "framework=dgl", "chunks=3", "microbatch.halo=sampled",
          "microbatch.fanouts=[4,4]")


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_dgl_loop_trains_the_runs_model_and_records_its_epochs(model: str) -> None:
    record = run_no_dropout(*LOADER, f"model={model}", "train.epochs=30")
    assert record["status"] == "completed", record.get("error")
    pipegnn = run_no_dropout(f"model={model}", "framework=dgl", "train.epochs=1")
    assert record["model"]["parameters"] == pipegnn["model"]["parameters"]  # the same widths
    assert record["microbatch"]["chunks"] == 3 and record["microbatch"]["fanouts"] == [4, 4]
    epochs = record["epochs"]
    assert [e["epoch"] for e in epochs] == list(range(30))
    # it learns (an optimiser step per batch: 3 an epoch, as DGL's tutorials step)
    assert epochs[-1]["train_loss"] < 0.8 * epochs[0]["train_loss"]
    assert record["final"]["best_val_acc"] > 1.5 / record["dataset"]["num_classes"]
    assert all(e["sample_s"] > 0 and e["epoch_time_s"] > e["sample_s"] for e in epochs)
    final = record["final"]
    assert final["best_epoch"] in range(30) and final["time_to_accuracy"]["train_s"] > 0
    assert final["time_to_best"]["wall_s"] > 0 and record["memory"]["peak_rss_bytes"] > 0
    assert record["timing"]["epoch_time_median_s"] > 0


@pytest.mark.parametrize("override, message", [
    ("framework=pyg", "framework=pyg is not valid; use framework=dgl"),
    ("microbatch.halo=exact", "microbatch.halo=exact is not valid; use microbatch.halo=sampled"),
    ("model=sage", "model=sage (residual=False) is not valid"),
    ("engine.capture=cuda_graph", "engine=dgl_loader: only the single engine's step can be recorded"),
])
def test_what_the_dgl_loop_cannot_run_is_invalid_before_it_loads(override: str, message: str) -> None:
    from pipegnn import run

    overrides = [o for o in LOADER if not o.startswith(override.split("=")[0] + "=")]
    if override == "microbatch.halo=exact":
        overrides = [o for o in overrides if not o.startswith("microbatch.fanouts")]
    record = run(make_cfg(*overrides, override))
    assert record["status"] == "invalid" and message in record["error"], record["error"]
    assert record["epochs"] == [] and record.get("dataset") is None
