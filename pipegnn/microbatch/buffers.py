"""The neighbour draw's 1-D writes and the buffers it keeps from draw to draw: small tensor operations
chosen for their cost on a CPU (each docstring gives its measurement), the same on any device."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


class Workspace:
    """Buffers that a draw's largest temporaries (a layer's CSR positions and node keys, one entry of each
    per kept edge, and the scratch's marks) are written into, kept from one draw to the next.

    Allocated anew every draw, they were mapped anew every draw: a fresh process's heap gave the
    freed temporaries back to the system after each draw, and the next draw's pages were zeroed again
    (Coauthor Physics, [10,10], one thread: 4,441 minor page faults a draw, 31.4 ms; kept here: none,
    23.8 ms). A buffer grows to its largest request (and a quarter more).
    """

    def __init__(self) -> None:
        self._buffers: dict[str, Tensor] = {}

    def get(self, name: str, size: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The first ``size`` entries of the buffer ``name``, for this draw's use until it asks again."""
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < size or buf.dtype != dtype or buf.device != device:
            buf = self._buffers[name] = torch.empty(size + size // 4, dtype=dtype, device=device)
        return buf[:size]

    def arange(self, size: int, device: torch.device) -> Tensor:
        """``0, 1, ..., size - 1`` (int64), written once each time its buffer grows (never to be written
        into)."""
        buf = self._buffers.get("arange")
        if buf is None or buf.numel() < size or buf.device != device:
            buf = self._buffers["arange"] = torch.arange(size + size // 4, device=device)
        return buf[:size]


def put(out: Tensor, index: Tensor, values: Tensor) -> Tensor:
    """``out[index] = values`` for a 1-D ``out`` and distinct ``index``: ``scatter_``, which took a third of
    ``index_copy_``'s time on a CPU (233K positions, 120K of them written: 79 against 234 us)."""
    return out.scatter_(0, index, values)


def fill(out: Tensor, index: Tensor, value: int) -> Tensor:
    """``out[index] = value`` for a 1-D ``out``: ``scatter_`` of the value expanded (0.6x ``index_fill_``'s
    time on a CPU, and 0.5x that of ``scatter_``'s own scalar form)."""
    return out.scatter_(0, index, out.new_full((1,), value).expand(index.numel()))


def nonzero(mask: Tensor) -> Tensor:
    """The places of a 1-D mask's true entries, ascending. On a CPU numpy's ``flatnonzero`` on the same
    memory (a sixth of ``torch.nonzero``'s time over 110K entries: 62 against 390 us)."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return torch.nonzero(mask).view(-1)
