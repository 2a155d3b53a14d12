"""A layer's historical halo rows: the rows a micro-batch receives pushed to the layer's cache, the halo
rows it reads beside them pulled from it (counted toward the step's traffic while training only); the
cache's buffers are non-persistent and move with the module."""
from __future__ import annotations

import pytest
import torch

from pipegnn.microbatch import MicroBatch
from pipegnn.models.halo_history import HaloHistory

EDGES = [torch.zeros(2, 0, dtype=torch.int32)] * 2


def micro_batch(nodes: list[int], sizes: list[int], sources: list[int]) -> MicroBatch:
    return MicroBatch(torch.tensor(nodes), sizes, EDGES, [None, None], sources)


def halo(refresh_only: bool = False) -> HaloHistory:
    """Layer 1 of two: micro-batch 0 receives nodes 0, 1, 2 and reads node 3 as a halo row; micro-batch
    1 receives 3, 4."""
    link = HaloHistory(1, num_nodes=5, dim=2, dtype=torch.float32, refresh_only=refresh_only)
    link.set_micro_batch(0, micro_batch([0, 1, 2, 3, 4], [5, 3, 1], [5, 4]))
    link.set_micro_batch(1, micro_batch([3, 4, 0], [3, 2, 1], [3, 2]))
    return link


@pytest.mark.parametrize("training", [True, False])
def test_received_rows_pushed_halo_rows_pulled(training: bool) -> None:
    link = halo()
    fresh = torch.randn(2, 2)
    link.push(1, fresh)  # micro-batch 1's rows: nodes 3 and 4 (as a refresh writes them)
    link.history.tick()
    h = torch.randn(3, 2)
    rows, read = link.rows(0, h, training)
    assert torch.equal(rows, torch.cat([h, fresh[:1]])) and read.tolist() == [0, 1, 2, 3]
    assert torch.equal(link.history.rows[:3], h)  # pushed
    traffic = link.history.traffic()
    assert (traffic["pushed_rows"], traffic["pulled_rows"]) == ((3, 1) if training else (0, 0))


def test_no_halo_rows_no_pull() -> None:
    link = halo()
    h = torch.randn(2, 2)
    rows, read = link.rows(1, h, training=True)
    assert rows is h and read.tolist() == [3, 4]
    assert link.history.traffic()["pulled_rows"] == 0


def test_buffers_are_not_persistent_and_move_with_the_module() -> None:
    link = halo()
    assert link.state_dict() == {}
    link.to(torch.float64)
    assert link.history.rows.dtype == torch.float64 and link.read[0].dtype == torch.long


def test_historical_micro_batches_are_fixed() -> None:
    with pytest.raises(ValueError, match="micro-batch 0 cannot be replaced"):
        halo().set_micro_batch(0, micro_batch([1, 2], [2, 1, 1], [2, 1]))


def test_refresh_only_reads_what_the_refresh_pushed_and_training_writes_nothing() -> None:
    """A cache of layer-wise evaluation alone: its rows are what `layerwise` pushed; a micro-batch
    without halo rows (an exact or sampled training one) gets its rows back untouched, pushes none and
    counts no traffic; micro-batches may be replaced (sampled halos draw new ones every epoch)."""
    link = halo(refresh_only=True)
    fresh = torch.randn(2, 2)
    link.push(1, fresh)
    h = torch.randn(3, 2)
    rows, read = link.rows(0, h, training=False)
    assert torch.equal(rows, torch.cat([h, fresh[:1]])) and read.tolist() == [0, 1, 2, 3]
    assert not link.history.rows[:3].any()  # not pushed: the refresh pushes before any read
    link.set_micro_batch(1, micro_batch([2, 0], [2, 2, 1], [2, 2]))  # replaced: no halo rows
    h = torch.randn(2, 2)
    rows, read = link.rows(1, h, training=True)
    assert rows is h and read.tolist() == [2, 0]
    assert not link.history.rows[[0, 2]].any()
    traffic = link.history.traffic()
    assert (traffic["pushed_rows"], traffic["pulled_rows"]) == (0, 0)
