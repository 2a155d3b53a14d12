"""The draw's 1-D writes equal plain indexing, and its workspace hands out the same memory from draw to draw
(pipegnn.microbatch.buffers)."""
from __future__ import annotations

import torch

from pipegnn.microbatch.buffers import Workspace, fill, nonzero, put
from pipegnn.microbatch.halo import InCSR
from pipegnn.microbatch.sample import NeighbourSampler

from tests.helpers import random_graph


def test_the_writes_equal_plain_indexing() -> None:
    g = torch.Generator().manual_seed(0)
    out = torch.randint(-5, 5, (1000,), generator=g)
    index = torch.randperm(1000, generator=g)[:300]
    values = torch.randint(100, 200, (300,), generator=g)
    expected = out.clone()
    expected[index] = values
    assert torch.equal(put(out.clone(), index, values), expected)
    expected[index[:50]] = -7
    assert torch.equal(fill(put(out.clone(), index, values), index[:50], -7), expected)
    mask = out > 0
    assert torch.equal(nonzero(mask), torch.nonzero(mask).view(-1))
    assert nonzero(torch.zeros(5, dtype=torch.bool)).numel() == 0


def test_a_workspace_keeps_its_buffers_and_grows_them() -> None:
    work = Workspace()
    first = work.get("pos", 100, torch.long, torch.device("cpu"))
    again = work.get("pos", 120, torch.long, torch.device("cpu"))  # within the quarter kept beyond
    assert again.data_ptr() == first.data_ptr() and again.numel() == 120
    larger = work.get("pos", 1000, torch.long, torch.device("cpu"))
    assert larger.numel() == 1000 and larger.data_ptr() != first.data_ptr()
    assert work.get("other", 10, torch.bool, torch.device("cpu")).dtype == torch.bool
    assert torch.equal(work.arange(7, torch.device("cpu")), torch.arange(7))
    assert torch.equal(work.arange(2000, torch.device("cpu")), torch.arange(2000))


def test_later_draws_write_into_the_first_draws_buffers() -> None:
    """Every share of a draw keeps its workspace: the second epoch's temporaries are the first's memory,
    and the micro-batches a draw returns hold none of it (the next draw would overwrite them)."""
    graph = random_graph(num_nodes=300, num_edges=3000)
    csr = InCSR(graph.edge_index, graph.num_nodes)
    sampler = NeighbourSampler(csr, [torch.arange(0, 300, 7), torch.arange(1, 300, 5)], [4, 3], seed=9)
    first = sampler.draw(0, workers=2)
    kept = [{name: buf.data_ptr() for name, buf in w._buffers.items()} for w in sampler._workspaces]
    assert len(kept) == 2 and all({"pos", "key", "arange"} <= set(k) for k in kept)
    copies = [[e.clone() for e in mb.edges] for mb in first]
    sampler.draw(1, workers=2)
    assert [{name: buf.data_ptr() for name, buf in w._buffers.items()} for w in sampler._workspaces] == kept
    assert all(torch.equal(a, b) for mb, c in zip(first, copies) for a, b in zip(mb.edges, c))
