"""Historical embeddings: a per-layer cache of node embeddings from earlier steps (GNNAutoScale-style).

Each stage whose layer reads halo rows owns one cache of its *input* embeddings on its own device. Every
forward pass pushes the rows it receives (fresh values) and pulls the halo rows it needs (possibly stale).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["History"]


class History(nn.Module):
    """Cache of ``[num_nodes, dim]`` embeddings with the training step at which each row was written.

    Args:
        num_nodes: number of graph nodes.
        dim: embedding width (the layer's input features).
        dtype: dtype of the embeddings (the model's).
    """

    def __init__(self, num_nodes: int, dim: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.register_buffer("rows", torch.zeros(num_nodes, dim, dtype=dtype), persistent=False)
        self.register_buffer("written", torch.full((num_nodes,), -1, dtype=torch.long), persistent=False)
        self.step = 0
        self._ages: dict[int, tuple[float, int]] = {}  # micro-batch -> (sum of ages, rows) this step
        self._pushed: dict[int, int] = {}  # micro-batch -> rows pushed this step

    def tick(self) -> None:
        """Start a new training step (ages are counted in steps)."""
        self.step += 1
        self._ages.clear()
        self._pushed.clear()

    @torch.no_grad()
    def push(self, nodes: Tensor, h: Tensor, micro_batch: int | None = None) -> None:
        """Store fresh embeddings ``h`` of ``nodes`` (``micro_batch``, when given: counted once per
        micro-batch and step toward :meth:`traffic`)."""
        self.rows[nodes] = h.detach().to(self.rows.dtype)
        self.written[nodes] = self.step
        if micro_batch is not None:
            self._pushed[micro_batch] = nodes.numel()

    def pull(self, nodes: Tensor, micro_batch: int | None = None) -> Tensor:
        """Cached embeddings of ``nodes``.

        Args:
            nodes: global node ids.
            micro_batch: when given (training), the rows' ages are counted once per micro-batch and
                step toward :meth:`staleness` (a checkpoint recomputation reads again: counted once).

        Raises:
            RuntimeError: some rows were never written (fill the cache with a refresh pass first).
        """
        written = self.written[nodes]
        if bool((written < 0).any()):
            raise RuntimeError("history cache read before it was filled: run a refresh pass first")
        if micro_batch is not None and micro_batch not in self._ages:
            self._ages[micro_batch] = (float((self.step - written).sum()), nodes.numel())
        return self.rows[nodes]

    def staleness(self) -> float:
        """Mean age in steps of the rows pulled during the current step (0 when none)."""
        total = sum(a for a, _ in self._ages.values())
        count = sum(n for _, n in self._ages.values())
        return total / count if count else 0.0

    def traffic(self) -> dict[str, float]:
        """The current training step's rows (and bytes) pulled from and pushed to this cache, and the
        pulled rows' mean age (:meth:`staleness`)."""
        pulled = sum(n for _, n in self._ages.values())
        pushed = sum(self._pushed.values())
        row = self.rows.size(1) * self.rows.element_size()
        return {"staleness": self.staleness(), "pulled_rows": pulled, "pushed_rows": pushed,
                "pulled_bytes": pulled * row, "pushed_bytes": pushed * row}
