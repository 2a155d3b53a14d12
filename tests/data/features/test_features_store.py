"""The feature store (pipegnn.data.features.store): rows read in the order asked, in coalesced runs,
in any dtype and never through a memory map; rows overwritten and tensors removed; FeatureRows over it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipegnn.data.features import DiskFeatureStore, FeatureMeta, FeatureRows


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
    meta = json.loads((store.folder / "node.x.json").read_text())
    assert meta["dtype"] == str(dtype).removeprefix("torch.")
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
