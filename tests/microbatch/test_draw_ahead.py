"""Drawing ahead: an epoch's micro-batches drawn in the background are that epoch's draw."""
from __future__ import annotations

import torch

from pipegnn.microbatch.draw_ahead import DrawAhead
from pipegnn.microbatch.halo import InCSR
from pipegnn.microbatch.sample import NeighbourSampler

from tests.microbatch.test_sample import dense_graph


def test_drawing_ahead_takes_the_epochs_own_draw() -> None:
    edge_index, weight = dense_graph()
    sampler = NeighbourSampler(InCSR(edge_index, 60, weight), [torch.tensor([0, 1]), torch.tensor([7])],
                               [3, 3], seed=4)
    ahead, series = DrawAhead(sampler), DrawAhead(sampler, ahead=False)
    try:
        ahead.start(2)
        taken, inline = ahead.take(2), series.take(2)
        assert taken.sample_s > 0 and taken.wait_s >= 0 and inline.wait_s == inline.sample_s > 0
        ahead.start(3)
        unstarted = ahead.take(5)  # not the one drawn ahead: drawn now, once the other is done
        for drawn, epoch in ((taken, 2), (inline, 2), (unstarted, 5)):
            for a, b in zip(drawn.micro_batches, sampler.draw(epoch), strict=True):
                assert torch.equal(a.nodes, b.nodes)
                assert all(torch.equal(x, y) for x, y in zip(a.edges, b.edges))
    finally:
        ahead.close()
        series.close()
