"""The feature-file caches (pipegnn.data.features.cache): a cached file that does not match is rebuilt and
a valid one reused; the partition-ordered copy keeps node ids and reads a part in one run."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from pipegnn.data.features import DiskFeatureStore, cached_store, partition_ordered
from pipegnn.data.features.files import FeatureFileError


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
        rebuilt = cached_store(store.folder, "k",
                               lambda s: s.write([x], rows=50, cols=7, dtype=x.dtype, key="k"))
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


def _write(store: DiskFeatureStore, x: torch.Tensor) -> None:
    store.write([x], rows=x.size(0), cols=x.size(1), dtype=x.dtype, key="k")


@pytest.mark.parametrize("damage", ["values", "sidecar nested", "order permuted", "order unreadable"])
def test_features_damaged_in_place_are_rebuilt_never_read(tmp_path: Path, x: torch.Tensor, damage: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Same-size damage that the sidecar's size and shape checks cannot see: the float 1000.0 written over
    the first rows of node.x.bin (loss 1021 instead of 1.10, completed), another valid permutation saved
    over the row order (another loss, completed), a sidecar nested too deeply for the parser (a failed
    run), an unreadable row order (every later run failed). The content checksums find each: the cached
    source is rebuilt, and the partition-ordered copy too, with a warning naming the file; the rows read
    afterwards are the true ones."""
    source = cached_store(tmp_path / "store", "k", lambda s: _write(s, x))
    part = torch.arange(50) % 4
    copy, _ = partition_ordered(source, part)
    side = copy.folder / "node.x.json"
    if damage == "values":
        raw = bytearray(copy.file().read_bytes())
        raw[:4 * 7 * 3] = torch.full((3 * 7,), 1000.0).numpy().tobytes()
        copy.file().write_bytes(bytes(raw))
    elif damage == "sidecar nested":
        side.write_text("[" * 100_000 + "]" * 100_000)
    elif damage == "order permuted":
        order = np.load(copy.folder / "node.x.order.npy", allow_pickle=False)
        np.save(copy.folder / "node.x.order.npy", order[::-1].copy(), allow_pickle=False)
    else:
        (copy.folder / "node.x.order.npy").write_bytes(b"not an npy file")
    with caplog.at_level(logging.WARNING):
        source = cached_store(tmp_path / "store", "k", lambda s: _write(s, x))
        copy, cached = partition_ordered(source, part)
    assert not cached and "rebuilding it" in caplog.text and str(copy.folder) in caplog.text
    assert torch.equal(copy["node", "x", None], x) and torch.equal(source["node", "x", None], x)


def test_a_damaged_source_is_an_error_naming_it_when_a_copy_is_built(tmp_path: Path, x: torch.Tensor) -> None:
    """The node-order file is read only to build a partition-ordered copy: damaged in place, that build
    stops with an error naming the file and how to clear it, instead of copying wrong rows."""
    source = cached_store(tmp_path / "store", "k", lambda s: _write(s, x))
    raw = bytearray(source.file().read_bytes())
    raw[:4] = torch.tensor([1000.0]).numpy().tobytes()
    source.file().write_bytes(bytes(raw))
    source = cached_store(tmp_path / "store", "k", lambda s: pytest.fail("rebuilt before it was read"))
    damaged = rf"{source.file()} is damaged.*delete {source.folder} to have"
    with pytest.raises(FeatureFileError, match=damaged):
        partition_ordered(source, torch.arange(50) % 4)


def test_a_store_never_serves_rows_of_a_file_damaged_after_its_check(tmp_path: Path, x: torch.Tensor) -> None:
    """A file damaged between the cache's check and the first read (or read by a store that nobody
    checked): the first read checks the content and raises, naming the file and how to clear it."""
    store = DiskFeatureStore(tmp_path / "store")
    _write(store, x)
    raw = bytearray(store.file().read_bytes())
    raw[-4:] = bytes(4)
    store.file().write_bytes(bytes(raw))
    damaged = r"node\.x\.bin is damaged: content checksum .* delete .*store"
    with pytest.raises(FeatureFileError, match=damaged):
        DiskFeatureStore(tmp_path / "store")["node", "x", torch.tensor([0, 1])]


def test_rows_overwritten_through_the_store_keep_a_valid_checksum(tmp_path: Path, x: torch.Tensor) -> None:
    """put_tensor with an index overwrites rows in place and records the new content's checksum: the
    file stays usable, and reads give the new rows."""
    store = DiskFeatureStore(tmp_path / "store")
    _write(store, x)
    store.put_tensor(torch.zeros(2, 7), "node", "x", index=torch.tensor([3, 9]))
    assert store.check(key="k", verify=True) is None
    expected = x.clone()
    expected[[3, 9]] = 0
    assert torch.equal(DiskFeatureStore(tmp_path / "store")["node", "x", None], expected)
