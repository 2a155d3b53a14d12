"""Edge-list helpers: the undirected CSR equals PyG's to_undirected + remove_self_loops."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.utils import remove_self_loops, to_undirected

from pipegnn.edges import sorted_unique, undirected_csr


def test_sorted_unique() -> None:
    keys = torch.tensor([5, 1, 5, 3, 1, 9], dtype=torch.int64)
    assert sorted_unique(keys).tolist() == [1, 3, 5, 9]
    assert sorted_unique(torch.empty(0, dtype=torch.int64)).numel() == 0


@pytest.mark.parametrize("num_nodes", [1, 2, 7, 300])
def test_undirected_csr_matches_pyg(num_nodes: int) -> None:
    g = torch.Generator().manual_seed(num_nodes)
    # Directed edges with duplicates, both directions of some, and self-loops.
    edge_index = torch.randint(num_nodes, (2, 4 * num_nodes), generator=g)
    xadj, adjncy = undirected_csr(edge_index, num_nodes)
    expected, _ = remove_self_loops(to_undirected(edge_index, num_nodes=num_nodes))
    row, col = expected.numpy()
    assert xadj.dtype == adjncy.dtype == np.int64
    assert xadj.tolist() == [0, *np.cumsum(np.bincount(row, minlength=num_nodes)).tolist()]
    assert adjncy.tolist() == col.tolist()
