"""Node features on disk (``data.features=disk``): the feature store's reads, files and errors, the
partition-ordered copy, the synthetic generator writing block by block, and training that equals
training with the features in memory."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from pipegnn import run
from pipegnn.data import SyntheticSpec, load_graph, make_synthetic, synthetic
from pipegnn.data.features import (DiskFeatureStore, FeatureFileError, FeatureMeta, FeatureRows,
                                   cached_store, files_opened, partition_ordered)

from conftest import make_cfg


def _store(tmp_path: Path, x: torch.Tensor) -> DiskFeatureStore:
    store = DiskFeatureStore(tmp_path / "store")
    store.put_tensor(x, "node", "x", index=None)
    return store


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(50, 7, generator=torch.Generator().manual_seed(0))


def test_store_returns_the_rows_asked(tmp_path: Path, x: torch.Tensor) -> None:
    store = _store(tmp_path, x)
    ids = torch.randint(50, (40,), generator=torch.Generator().manual_seed(1))  # random, with duplicates
    assert torch.equal(store["node", "x", ids], x[ids])  # rows in the order asked, duplicates repeated
    assert torch.equal(store["node", "x", None], x)  # every row, node order
    assert torch.equal(store["node", "x", slice(None)], x)
    assert torch.equal(store["node", "x", slice(10, 20, 3)], x[10:20:3])
    assert torch.equal(store["node", "x", 4], x[4])
    empty = store["node", "x", torch.empty(0, dtype=torch.long)]
    assert empty.shape == (0, 7) and empty.dtype == torch.float32
    assert store.get_tensor_size("node", "x") == (50, 7)
    assert store.get_tensor_size("node", "x", index=ids) == (40, 7)
    assert [(a.group_name, a.attr_name) for a in store.get_all_tensor_attrs()] == [("node", "x")]
    with pytest.raises(IndexError, match="out of range"):
        store["node", "x", torch.tensor([50])]
    assert store.get_tensor_size("node", "y") is None


def test_store_counts_bytes_and_coalesced_reads(tmp_path: Path, x: torch.Tensor) -> None:
    store = _store(tmp_path, x)
    row = 7 * 4
    store["node", "x", torch.tensor([9, 3, 4, 5, 4, 9])]  # distinct rows 3-5 and 9: two runs, read once
    assert store.read_stats() == {"bytes": 4 * row, "calls": 2}
    store["node", "x", torch.arange(50)]
    assert store.read_stats() == {"bytes": 54 * row, "calls": 3}
    store["node", "x", torch.empty(0, dtype=torch.long)]
    assert store.read_stats() == {"bytes": 54 * row, "calls": 3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_store_is_dtype_agnostic(tmp_path: Path, x: torch.Tensor, dtype: torch.dtype) -> None:
    x = x.to(dtype)
    store = _store(tmp_path, x)
    ids = torch.tensor([7, 1, 1, 30])
    assert store["node", "x", ids].dtype == dtype and torch.equal(store["node", "x", ids], x[ids])
    assert json.loads((store.folder / "node.x.json").read_text())["dtype"] == str(dtype).removeprefix("torch.")
    assert store.file().stat().st_size == x.numel() * x.element_size()
    rows = FeatureRows(store)
    assert (rows.shape, rows.dtype) == (x.shape, dtype) and torch.equal(rows[ids], x[ids])
    assert torch.equal(rows.to(torch.float64)[ids], x[ids].double())
    assert store.meta() == FeatureMeta(50, 7, dtype, store.folder)


def test_store_updates_and_removes(tmp_path: Path, x: torch.Tensor) -> None:
    store = _store(tmp_path, x)
    ids = torch.tensor([40, 2, 3])
    store.put_tensor(torch.zeros(3, 7), "node", "x", index=ids)
    expected = x.clone()
    expected[ids] = 0
    assert torch.equal(store["node", "x", None], expected)
    with pytest.raises(ValueError, match="at most once"):
        store.put_tensor(torch.zeros(2, 7), "node", "x", index=torch.tensor([1, 1]))
    assert store.remove_tensor("node", "x", index=None)
    assert store.get_all_tensor_attrs() == [] and not any(store.folder.iterdir())


def test_reads_never_map_the_file(tmp_path: Path, x: torch.Tensor) -> None:
    """train.memory_limit_gb caps the address space: the file is read with pread, never mapped."""
    store = _store(tmp_path, x)
    store["node", "x", torch.tensor([1, 2, 30])]
    assert str(store.file()) not in Path("/proc/self/maps").read_text()


def test_file_that_does_not_match_its_sidecar(tmp_path: Path, x: torch.Tensor, caplog) -> None:
    store = _store(tmp_path, x)
    data, side = store.file(), store.folder / "node.x.json"
    data.write_bytes(data.read_bytes()[:-10])  # truncated
    with pytest.raises(FeatureFileError, match=r"has 1390 bytes, its sidecar says 50 x 7 float32 = 1400"):
        DiskFeatureStore(store.folder)["node", "x", torch.tensor([0])]
    meta = json.loads(side.read_text())
    side.write_text(json.dumps({**meta, "dtype": "int8"}))
    with pytest.raises(FeatureFileError, match="malformed sidecar"):
        DiskFeatureStore(store.folder).meta()
    side.write_text("{not json")
    with pytest.raises(FeatureFileError, match="unreadable feature sidecar"):
        DiskFeatureStore(store.folder).meta()
    # The cache rebuilds what does not match, with a warning (as cached graphs and plans do).
    with caplog.at_level(logging.WARNING):
        rebuilt = cached_store(store.folder, "k", lambda s: s.write([x], rows=50, cols=7, dtype=x.dtype, key="k"))
    assert "ignoring cached feature file" in caplog.text and torch.equal(rebuilt["node", "x", None], x)
    caplog.clear()
    again = cached_store(store.folder, "k", lambda s: pytest.fail("a valid cached file was rebuilt"))
    assert caplog.text == "" and torch.equal(again["node", "x", None], x)


def test_order_file_must_be_a_permutation(tmp_path: Path, x: torch.Tensor) -> None:
    store = DiskFeatureStore(tmp_path)
    reverse = torch.arange(50).flip(0)  # file row i holds node 49 - i
    store.write([x[reverse]], rows=50, cols=7, dtype=x.dtype, order=reverse)
    assert torch.equal(store["node", "x", torch.tensor([3, 0])], x[[3, 0]])
    assert store.read_stats()["calls"] == 2  # nodes 3 and 0 are file rows 46 and 49
    order = np.arange(50, dtype=np.int64)
    order[1] = 0
    np.save(tmp_path / "node.x.order.npy", order)
    with pytest.raises(FeatureFileError, match="not a permutation"):
        DiskFeatureStore(tmp_path)["node", "x", torch.tensor([0])]


def test_partition_ordered_copy(tmp_path: Path, x: torch.Tensor) -> None:
    source = _store(tmp_path, x)
    part = torch.randint(4, (50,), generator=torch.Generator().manual_seed(2))
    store, cached = partition_ordered(source, part)
    assert not cached and store.folder.parent == source.folder
    order = np.load(store.folder / "node.x.order.npy", allow_pickle=False)
    assert np.array_equal(order, torch.argsort(part, stable=True).numpy())  # parts contiguous, ids ascending
    assert torch.equal(store["node", "x", None], x)  # node ids unchanged: only the file order differs
    ids = torch.randperm(50)[:20]
    assert torch.equal(store["node", "x", ids], x[ids])
    before = store.read_stats()
    store["node", "x", (part == 2).nonzero().view(-1)]  # one part's nodes: one run, one read
    assert store.read_stats()["calls"] - before["calls"] == 1
    assert partition_ordered(source, part)[1]  # cached
    half, _ = partition_ordered(source, part, torch.bfloat16)
    assert half.meta().dtype == torch.bfloat16 and torch.equal(half["node", "x", ids], x[ids].bfloat16())


def test_synthetic_block_wise_generation_equals_memory(tmp_path: Path, monkeypatch) -> None:
    """Several feature blocks: the rows written block by block equal the in-memory matrix, and so do
    the topology, labels and split (also when the features are not generated at all)."""
    monkeypatch.setattr(synthetic, "_FEATURE_BLOCK", 64)
    spec = SyntheticSpec(num_nodes=300, num_features=20, num_communities=6, num_val=30, num_test=30)
    memory = make_synthetic(spec)
    written: list[int] = []
    write = DiskFeatureStore.write

    def spy(self, blocks, **kwargs):
        return write(self, (written.append(b.size(0)) or b for b in blocks), **kwargs)

    monkeypatch.setattr(DiskFeatureStore, "write", spy)
    monkeypatch.setattr(synthetic, "_features", lambda *a: pytest.fail("the whole matrix was built"))
    store = DiskFeatureStore(tmp_path)
    disk = make_synthetic(spec, features="disk", store=store)
    assert written == [64, 64, 64, 64, 44]  # one block in memory at a time
    assert disk.x is None and disk.features == FeatureMeta(300, 20, torch.float32, tmp_path)
    assert torch.equal(store["node", "x", None], memory.x)
    monkeypatch.setattr(synthetic, "_count_block", lambda *a: pytest.fail("features generated"))
    topology = make_synthetic(spec, features="none")
    for g in (disk, topology):
        assert g.structure_hash() == memory.structure_hash() and torch.equal(g.y, memory.y)
    assert topology.features == FeatureMeta(300, 20, torch.float32)


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


def test_bad_storage_is_invalid() -> None:
    record = run(make_cfg("data.features=ssd"))
    assert record["status"] == "invalid"
    assert record["error"] == "data.features='ssd' is not valid; valid: memory, disk"


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
    assert (memory["dataset"]["feature_dtype"], memory["dataset"]["feature_bytes"]) == ("float32", 400 * 16 * 4)
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
    assert [e["train_loss"] for e in piped["epochs"]] == pytest.approx([e["train_loss"] for e in single["epochs"]],
                                                                       rel=1e-4)
    first, other = piped["features"]["files_opened_per_rank"]
    assert first >= 1 and other == 0
    assert piped["features"]["train_calls_mean"] >= 1
    assert files_opened() == opened  # the launching process opened none either
