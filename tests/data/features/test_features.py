"""Node features on disk (``data.features=disk``), end to end: load_graph writes them to a feature file,
and training from it equals training with the features in memory (the pipeline reading them on its
first rank only)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipegnn import run
from pipegnn.data import load_graph
from pipegnn.data.features import DiskFeatureStore, files_opened

from tests.helpers import make_cfg


def test_load_graph_keeps_features_on_disk(tmp_path: Path, data_root: Path) -> None:
    spec = {"name": "synthetic", "num_nodes": 200, "num_features": 12, "num_val": 20, "num_test": 20}
    memory = load_graph(spec, None, tmp_path)
    disk = load_graph(spec, None, tmp_path, features="disk")
    assert disk.x is None and disk.features.folder.parent == tmp_path / "features"
    assert torch.equal(DiskFeatureStore(disk.features.folder)["node", "x", None], memory.x)
    again = load_graph(spec, None, tmp_path, features="disk")  # cached by the spec
    assert again.features == disk.features and again.structure_hash() == memory.structure_hash()
    # A real graph is loaded whole once and its features written to the file.
    cora = load_graph({"name": "cora"}, data_root, tmp_path)
    on_disk = load_graph({"name": "cora"}, data_root, tmp_path, features="disk")
    assert on_disk.x is None and on_disk.num_features == 1433 and on_disk.feature_dtype == torch.float32
    assert torch.equal(DiskFeatureStore(on_disk.features.folder)["node", "x", None], cora.x)


def _run(*overrides: str) -> dict:
    record = run(make_cfg("model.dropout=0", "chunks=3", *overrides))
    assert record["status"] == "completed", (record["error"], record.get("traceback"))
    return record


def _same_training(memory: dict, disk: dict) -> None:
    for key in ("train_loss", "train_acc", "val_acc", "test_acc"):
        assert [e[key] for e in disk["epochs"]] == [e[key] for e in memory["epochs"]], key


@pytest.mark.parametrize("first", ["once_per_step", "per_micro_batch"])
@pytest.mark.parametrize("engine", ["single", "gpipe"])
def test_training_from_disk_equals_memory(engine: str, first: str) -> None:
    common = (f"engine={engine}", f"microbatch.first_transform={first}")
    memory = _run(*common)
    disk = _run(*common, "data.features=disk")
    _same_training(memory, disk)
    assert memory["features"] == {"storage": "memory"}
    dataset = memory["dataset"]
    assert (dataset["feature_dtype"], dataset["feature_bytes"]) == ("float32", 400 * 16 * 4)
    f = disk["features"]
    assert (f["storage"], f["order"], f["file_bytes"]) == ("disk", "partition", 400 * 16 * 4)
    assert disk["dataset"]["feature_dtype"] == "float32"
    assert Path(f["path"]).is_file() and "/features/synthetic-" in f["path"]
    assert f["train_bytes_mean"] > 0 and f["train_calls_mean"] >= 1
    assert f["eval_bytes_mean"] > 0 and f["eval_calls_mean"] >= 1
    assert all(set(e["feature_reads"]) == {"train_bytes", "train_calls", "eval_bytes", "eval_calls"}
               for e in disk["epochs"])
    for key in ("load_s", "features_order_s", "setup_s", "microbatch_build_s"):
        assert disk["timing"][key] >= 0
    assert disk["memory"]["setup_peak_rss_bytes"] > 50e6


def test_historical_training_from_disk_equals_memory() -> None:
    _same_training(_run("engine=single", "microbatch.halo=historical"),
                   _run("engine=single", "microbatch.halo=historical", "data.features=disk"))


def test_pipeline_reads_features_on_its_first_rank_only() -> None:
    """engine=pipelining with features on disk trains as the single engine does, and only rank 0 (the
    first stage, which holds the first layer's transform) opens a feature file."""
    opened = files_opened()
    single = _run("engine=single", "chunks=2")
    piped = _run("engine=pipelining", "chunks=2", "data.features=disk")
    assert [e["train_loss"] for e in piped["epochs"]] == pytest.approx(
        [e["train_loss"] for e in single["epochs"]], rel=1e-4)
    first, other = piped["features"]["files_opened_per_rank"]
    assert first >= 1 and other == 0
    assert piped["features"]["train_calls_mean"] >= 1
    assert files_opened() == opened  # the launching process opened none either
