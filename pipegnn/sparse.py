"""Node features kept as a sparse CSR matrix (``data.features=sparse``): bag-of-words features, whose first
transform is then a sparse product (``F.linear`` takes a CSR input, gradients to the weight included).

Coauthor Physics (34,493 x 8,415, 0.4% non-zero): a GCN's first transform, forward and backward, takes
0.08 s sparse against 0.83 s dense on one thread, and the features 14 MB against 1.16 GB
(``benchmarks/sparse_features.py``). Two operations torch lacks for CSR are written here: selecting rows
(``index_select`` has no CSR kernel) and dropout of the stored values (dropping a zero changes nothing,
so dropping only the stored entries is dense dropout's product exactly, in distribution).
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from pipegnn.dropout import dropout

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def is_csr(x: object) -> bool:
    """Whether ``x`` is a sparse CSR tensor."""
    return isinstance(x, Tensor) and x.layout == torch.sparse_csr


def to_csr(x: Tensor) -> Tensor:
    """``x`` as a CSR matrix (torch's note that CSR support is in beta, silenced: the operations used here
    are checked by tests)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
        return x.to_sparse_csr()


def _csr(crow: Tensor, col: Tensor, values: Tensor, rows: int, cols: int) -> Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, (rows, cols), check_invariants=False)


def csr_rows(x: Tensor, index: Tensor) -> Tensor:
    """The rows ``index`` of CSR matrix ``x``, as a CSR matrix (in ``index``'s order, repeats allowed)."""
    crow, col, values = x.crow_indices(), x.col_indices(), x.values()
    index = index.to(crow.device)
    starts, ends = crow[index], crow[index + 1]
    lengths = ends - starts
    new_crow = torch.zeros(index.numel() + 1, dtype=crow.dtype, device=crow.device)
    torch.cumsum(lengths, 0, out=new_crow[1:])
    # each kept entry's position: its row's start in x plus its offset within the row
    row_of = torch.repeat_interleave(torch.arange(index.numel(), device=crow.device), lengths)
    offset = torch.arange(row_of.numel(), device=crow.device) - new_crow[row_of]
    take = starts[row_of] + offset
    return _csr(new_crow, col[take], values[take], index.numel(), x.size(1))


def sparse_dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Dropout of CSR matrix ``x``'s stored values ([`pipegnn.dropout.dropout`][pipegnn.dropout.dropout]'s
    mask)."""
    if not training or p <= 0:
        return x
    return _csr(x.crow_indices(), x.col_indices(), dropout(x.values(), p, training), x.size(0), x.size(1))
