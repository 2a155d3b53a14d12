"""The feature files (pipegnn.data.features.files): a file that does not match its sidecar, and a row
order that is not a permutation, are refused when read."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pipegnn.data.features import DiskFeatureStore, FeatureFileError
from pipegnn.data.features.files import read_position


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(50, 7, generator=torch.Generator().manual_seed(0))


def test_file_that_does_not_match_its_sidecar(tmp_path: Path, x: torch.Tensor) -> None:
    store = DiskFeatureStore(tmp_path / "store")
    store.put_tensor(x, "node", "x", index=None)
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
        read_position(tmp_path / "node.x.order.npy", 50)
    with pytest.raises(FeatureFileError, match=r"node\.x\.order\.npy is damaged"):  # its checksum, first
        DiskFeatureStore(tmp_path)["node", "x", torch.tensor([0])]


@pytest.mark.parametrize("size", [1 << 40, 100])
def test_an_order_file_of_the_wrong_size_is_refused_before_it_is_read(tmp_path: Path, x: torch.Tensor,
                                                                      size: int) -> None:
    """A 1 TB sparse node.x.order.npy hung a run past 150 s (its checksum read it whole; the matrix's size
    was checked, the order's not): refused by its size before any read, and a truncated one (a second
    case) too."""
    store = DiskFeatureStore(tmp_path)
    reverse = torch.arange(50).flip(0)
    store.write([x[reverse]], rows=50, cols=7, dtype=x.dtype, order=reverse)
    with open(tmp_path / "node.x.order.npy", "r+b") as f:
        f.truncate(size)
    with pytest.raises(FeatureFileError, match=rf"has {size} bytes, its sidecar's 50 rows take 400"):
        DiskFeatureStore(tmp_path).meta()
