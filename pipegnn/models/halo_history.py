"""A layer's historical halo rows ([`HaloHistory`][pipegnn.models.halo_history.HaloHistory]): the rows each
micro-batch receives pushed to the layer's history cache, the halo rows it reads beside them pulled from
it."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.history import History
from pipegnn.models.units import TensorList, put

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


class HaloHistory(nn.Module):
    """The link of a layer's transform unit to its history cache, a child module of the unit (historical
    mode; its buffers move with it).

    Args:
        layer: index of the layer (0-based).
        num_nodes: nodes of the graph.
        dim: the layer's input features.
        dtype: dtype of the cached rows.
        node_dropout: the layer's input dropout when the cache draws one mask per node and step
            ([`History.dropout`][pipegnn.microbatch.history.History.dropout]), else 0.
        refresh_only: the cache serves layer-wise evaluation only (``microbatch.evaluation=layerwise`` with
            exact or sampled halos): `layerwise` fills it, and the training micro-batches, which read no
            halo rows, neither push nor pull (nor count traffic), and may be replaced (sampled halos).

    Attributes:
        history: the cache of the layer's input rows.
        read: global ids of each micro-batch's rows: those received, then those pulled.
        received: rows each micro-batch receives (the first of ``read``).
    """

    def __init__(self, layer: int, num_nodes: int, dim: int, dtype: torch.dtype, node_dropout: float = 0.0,
                 refresh_only: bool = False):
        super().__init__()
        self.layer, self.refresh_only = layer, refresh_only
        self.history = History(num_nodes, dim, dtype, node_dropout)
        self.read: TensorList[Tensor] = TensorList()
        self.received: list[int] = []

    def set_micro_batch(self, m: int, mb: MicroBatch) -> None:
        """Make ``mb`` micro-batch ``m`` (appended when ``m`` is the next id; replaced only when
        ``refresh_only``: historical halos' micro-batches are fixed)."""
        if m != len(self.received) and not self.refresh_only:
            raise ValueError(f"layer {self.layer}: a history cache's micro-batches are fixed (historical "
                             f"halos): micro-batch {m} cannot be replaced")
        self.read[m] = mb.nodes[:mb.sources[self.layer]]
        put(self.received, m, mb.sizes[self.layer])

    def push(self, m: int, h: Tensor) -> None:
        """Store micro-batch ``m``'s received rows ``h`` (fresh), outside a training step."""
        self.history.push(self.read[m][:self.received[m]], h)

    def rows(self, m: int, h: Tensor, training: bool) -> tuple[Tensor, Tensor]:
        """Micro-batch ``m``'s input rows: the received ``h`` (pushed to the cache), then its halo rows
        (pulled from it); and their global ids. ``training``: the push and the pull count toward the
        step's traffic and staleness ([`History.traffic`][pipegnn.microbatch.history.History.traffic])."""
        read, own, step = self.read[m], self.received[m], m if training else None
        if self.refresh_only:  # `layerwise` pushed every fresh row of the layer before this read
            return (h if read.numel() == own else torch.cat([h, self.history.pull(read[own:])])), read
        self.history.push(read[:own], h, step)
        if read.numel() > own:
            h = torch.cat([h, self.history.pull(read[own:], step)])
        return h, read
