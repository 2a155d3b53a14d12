"""The feature-file caches (pipegnn.data.features.cache): a cached file that does not match is rebuilt and
a valid one reused; the partition-ordered copy keeps node ids and reads a part in one run."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from pipegnn.data.features import DiskFeatureStore, cached_store, partition_ordered


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(50, 7, generator=torch.Generator().manual_seed(0))


def test_cached_store_rebuilds_what_does_not_match(tmp_path: Path, x: torch.Tensor, caplog) -> None:
    store = DiskFeatureStore(tmp_path / "store")
    store.put_tensor(x, "node", "x", index=None)
    store.file().write_bytes(store.file().read_bytes()[:-10])  # truncated
    (store.folder / "node.x.json").write_text("{not json")
    # The cache rebuilds what does not match, with a warning (as cached graphs and plans do).
    with caplog.at_level(logging.WARNING):
        rebuilt = cached_store(store.folder, "k", lambda s: s.write([x], rows=50, cols=7, dtype=x.dtype, key="k"))
    assert "ignoring cached feature file" in caplog.text and torch.equal(rebuilt["node", "x", None], x)
    caplog.clear()
    again = cached_store(store.folder, "k", lambda s: pytest.fail("a valid cached file was rebuilt"))
    assert caplog.text == "" and torch.equal(again["node", "x", None], x)


def test_partition_ordered_copy(tmp_path: Path, x: torch.Tensor) -> None:
    source = DiskFeatureStore(tmp_path / "store")
    source.put_tensor(x, "node", "x", index=None)
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
