"""The first unit's feature source: rows in memory (all of them without a copy), out of core (read on
the host, moved to the ids' device), or only described (an error naming the unit); its buffers are
non-persistent and move with the module."""
from __future__ import annotations

import pytest
import torch
from torch import Tensor

from pipegnn.data.features import FeatureMeta
from pipegnn.microbatch import MicroBatch
from pipegnn.models.feature_source import FeatureSource


class Rows:
    """Rows out of core: ``rows[ids]`` a new CPU tensor; the ids it was asked for kept."""

    def __init__(self, x: Tensor):
        self.x = x
        self.asked: list[Tensor] = []

    def __getitem__(self, index: Tensor) -> Tensor:
        self.asked.append(index)
        return self.x[index].clone()


def test_rows_in_memory_and_all_of_them_without_a_copy() -> None:
    x = torch.randn(5, 3)
    source = FeatureSource(x, "transform0")
    index = torch.tensor([3, 0, 3])
    assert torch.equal(source.rows(index), x[index])
    every = torch.arange(5)
    assert source.rows(every, distinct=True) is x  # distinct ids, as many as the nodes: all rows
    assert source.rows(every) is not x and torch.equal(source.rows(every), x)
    assert torch.equal(source.rows(torch.tensor([1, 4]), distinct=True), x[[1, 4]])


def test_rows_out_of_core_are_read_on_the_host() -> None:
    x = torch.randn(5, 3)
    rows = Rows(x)
    source = FeatureSource(rows, "input")
    assert source.features is None and source.stored is rows
    out = source.rows(torch.tensor([4, 2]))
    assert torch.equal(out, x[[4, 2]]) and out.device == torch.device("cpu")
    assert rows.asked[0].device == torch.device("cpu")


def test_a_description_only_names_the_unit_when_read() -> None:
    source = FeatureSource(FeatureMeta(5, 3, torch.float32), "input")
    assert source.features is None and source.stored is None
    with pytest.raises(RuntimeError, match="input holds no features here"):
        source.rows(torch.tensor([0]))


def test_new_features_keep_the_micro_batches() -> None:
    source = FeatureSource(FeatureMeta(5, 3, torch.float32), "transform0")
    mb = MicroBatch(torch.tensor([2, 0, 4]), [3, 1], [torch.zeros(2, 0, dtype=torch.int32)], [None])
    source.add_micro_batch(mb)
    x = torch.randn(5, 3)
    source.set(x)
    assert len(source.nodes) == 1 and torch.equal(source.rows(source.nodes[0]), x[[2, 0, 4]])


def test_buffers_are_not_persistent_and_move_with_the_module() -> None:
    source = FeatureSource(torch.randn(5, 3), "transform0")
    source.add_micro_batch(MicroBatch(torch.tensor([1, 3]), [2, 1], [torch.zeros(2, 0, dtype=torch.int32)],
                                      [None]))
    assert source.state_dict() == {}
    source.to(torch.float64)
    assert source.features is not None and source.features.dtype == torch.float64
    assert source.nodes[0].dtype == torch.long  # ids stay ids
