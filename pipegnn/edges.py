"""Edge-list operations with bounded memory for graphs of millions of nodes.

Written by hand because PyG's ``to_undirected`` / ``coalesce`` build several index arrays of every edge
(concatenation, keys, sort permutation, gathered copies), which set the peak of large runs' setup; here
the only per-edge arrays are one int64 key and one mask.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def sorted_unique(keys: Tensor) -> Tensor:
    """Sorted distinct values of a 1-D int64 tensor (sorts ``keys`` in place; no index arrays)."""
    a = keys.numpy()
    a.sort()
    if a.size == 0:
        return keys
    first = np.empty(a.size, dtype=bool)
    first[0] = True
    np.not_equal(a[1:], a[:-1], out=first[1:])
    return torch.from_numpy(a[first])


def undirected_csr(edge_index: Tensor, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The undirected simple graph of ``edge_index`` as CSR: both directions of every edge, no
    self-loops, no duplicates, neighbours sorted; ``(xadj [N + 1], adjncy [2E'])``, int64 (METIS's
    ``idx_t`` in pymetis, so it reads them without copies)."""
    row, col = edge_index
    proper = torch.nonzero(row != col).view(-1)
    m = proper.numel()
    keys = torch.empty(2 * m, dtype=torch.int64)
    forward, backward = keys[:m], keys[m:]
    torch.index_select(row, 0, proper, out=forward)
    forward.mul_(num_nodes).add_(col[proper])  # row * n + col
    torch.index_select(col, 0, proper, out=backward)
    backward.mul_(num_nodes).add_(row[proper])  # col * n + row: the reverse direction
    del proper
    adjncy = sorted_unique(keys).numpy()
    del keys
    xadj = np.searchsorted(adjncy, np.arange(num_nodes + 1, dtype=np.int64) * num_nodes)
    np.remainder(adjncy, num_nodes, out=adjncy)
    return xadj.astype(np.int64, copy=False), adjncy
