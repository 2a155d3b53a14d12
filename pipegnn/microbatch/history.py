"""Historical embeddings: a per-layer cache of node embeddings from earlier steps (GNNAutoScale-style).

Each stage whose layer reads halo rows owns one cache of its *input* embeddings on its own device. Every
forward pass pushes the rows it receives (fresh values) and pulls the halo rows it needs (possibly stale).
With ``microbatch.halo_dropout=node`` the cache also holds the layer's input dropout mask, one per node
and step ([`History.dropout`][pipegnn.microbatch.history.History.dropout]).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pipegnn.config.choices import HaloDropout, names
from pipegnn.dropout import fill_mask_
from pipegnn.hostcalls import read_on_host

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: ``microbatch.halo_dropout``: ``read`` (every read of a halo row draws its own input dropout mask, as
#: GNNAutoScale does) or ``node`` (one mask per node and step, as full-graph training draws it).
HALO_DROPOUTS = names(HaloDropout)



class History(nn.Module):
    """Cache of ``[num_nodes, dim]`` embeddings with the training step at which each row was written.

    Args:
        num_nodes: number of graph nodes.
        dim: embedding width (the layer's input features).
        dtype: dtype of the embeddings (the model's).
        node_dropout: the layer's input dropout when it draws one mask per node and step (at
            [`tick`][pipegnn.microbatch.history.History.tick] or at each node's first read in the step, see
            [`dropout`][pipegnn.microbatch.history.History.dropout]); 0: the cache draws none.
    """

    rows: Tensor  # buffers
    written: Tensor
    steps: Tensor
    ages: Tensor

    def __init__(self, num_nodes: int, dim: int, dtype: torch.dtype = torch.float32,
                 node_dropout: float = 0.0):
        super().__init__()
        self.register_buffer("rows", torch.zeros(num_nodes, dim, dtype=dtype), persistent=False)
        self.register_buffer("written", torch.full((num_nodes,), -1, dtype=torch.long), persistent=False)
        # The step counter on the device too, and the summed ages of the rows pulled this step: a step's
        # writes and reads of them are device operations only (no value of the host's baked into a
        # recorded step, no host read), set at `tick`, outside the step; read once per step by whoever
        # reports (`age_sum`).
        self.register_buffer("steps", torch.zeros((), dtype=torch.long), persistent=False)
        self.register_buffer("ages", torch.zeros((), dtype=torch.long), persistent=False)
        self.step = 0
        self._filled = False  # every row written at least once
        self._aged: set[int] = set()  # micro-batches whose pulled rows' ages are counted this step
        # micro-batch -> rows pulled, rows pushed (in a step: the same every step, plans being fixed)
        self._pulled: dict[int, int] = {}
        self._pushed: dict[int, int] = {}
        self.node_dropout = node_dropout
        # this step's dropout mask, kept entries already scaled (0 or 1 / (1 - p) per node and feature, in
        # the rows' dtype, as torch's dropout builds its noise: a read is one index_select and one product),
        # and the step at which each node's row of it was drawn
        self._mask: Tensor | None = None
        self._drawn: Tensor | None = None
        self._whole = -1  # the step whose mask was drawn for every node at once

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the cache: its rows, their write steps and the step counter."""
        return {"rows": self.rows, "written": self.written, "step": self.step}

    def load_state(self, state: dict[str, Any]) -> None:
        """Put [`state`][pipegnn.microbatch.history.History.state]'s ``state`` back."""
        self.rows.copy_(state["rows"])
        self.written.copy_(state["written"])
        self.step = int(state["step"])
        self.steps.fill_(self.step)
        self._filled = False  # checked again on the next read

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> "History":
        # drawn again on the new device, in the new dtype
        self._mask, self._drawn, self._whole = None, None, -1
        return super()._apply(fn, *args, **kwargs)

    def tick(self, draw: bool = False) -> None:
        """Start a new training step (ages are counted in steps). With ``node_dropout`` every node's mask
        is drawn again: now with ``draw`` (a pipeline stage waiting for its first micro-batch), else at
        the node's first read in the step."""
        self.step += 1
        self.steps.fill_(self.step)  # (a host value written, not read: no wait)
        self.ages.zero_()
        self._aged.clear()
        if draw:
            self.draw_masks()

    def draw_masks(self) -> None:
        """Draw every node's dropout mask for the current step now (with ``node_dropout``; else nothing)."""
        if 0 < self.node_dropout < 1:
            self._draw(None)

    @torch.no_grad()
    def push(self, nodes: Tensor, h: Tensor, micro_batch: int | None = None) -> None:
        """Store fresh embeddings ``h`` of ``nodes`` (``micro_batch``, when given: counted once per
        micro-batch and step toward [`traffic`][pipegnn.microbatch.history.History.traffic])."""
        self.rows.index_copy_(0, nodes, h.detach().to(self.rows.dtype))
        self.written.index_put_((nodes,), self.steps)  # the device's step: index_fill_ reads it on the host
        if micro_batch is not None:
            self._pushed[micro_batch] = nodes.numel()

    def pull(self, nodes: Tensor, micro_batch: int | None = None) -> Tensor:
        """Cached embeddings of ``nodes``.

        Args:
            nodes: global node ids.
            micro_batch: when given (training), the rows' ages are counted once per micro-batch and
                step toward [`staleness`][pipegnn.microbatch.history.History.staleness] (a checkpoint
                recomputation reads again: counted once).

        Raises:
            RuntimeError: some rows were never written (fill the cache with a refresh pass first).
        """
        if not self._filled:  # rows are never unwritten again: once all are written, reads need no check
            if bool((self.written.index_select(0, nodes) < 0).any()):
                raise RuntimeError("history cache read before it was filled: run a refresh pass first")
            self._filled = bool((self.written >= 0).all())
        if micro_batch is not None and micro_batch not in self._aged:
            self.ages.add_((self.steps - self.written.index_select(0, nodes)).sum())
            self._aged.add(micro_batch)
            self._pulled[micro_batch] = nodes.numel()
        return self.rows.index_select(0, nodes)

    def dropout(self, nodes: Tensor, h: Tensor) -> Tensor:
        """Dropout of rows ``h`` of ``nodes`` (distinct) with one mask per node and training step, as
        full-graph training draws it: a micro-batch and every micro-batch that pulls the same node as a
        halo row drop the same features of it. A node's mask is drawn at
        [`tick`][pipegnn.microbatch.history.History.tick] or at its first read in the step, so the random
        numbers drawn per step are the graph's, not the (about twice as many, with halo rows) rows read; kept
        entries are scaled by ``1 / (1 - p)`` (``p``: ``node_dropout``) as `torch.nn.functional.dropout`
        does."""
        p = self.node_dropout
        if p <= 0:
            return h
        if p >= 1:
            return h * 0
        if self._whole != self.step:  # not every row drawn at the step's start
            self._draw(nodes)
        assert self._mask is not None  # drawn
        return h * self._mask.index_select(0, nodes)

    def _draw(self, nodes: Tensor | None) -> None:
        """This step's mask rows of ``nodes`` not drawn yet in the step (None: of every node)."""
        if self._mask is None:
            self._mask = torch.empty_like(self.rows)
            self._drawn = torch.full_like(self.written, -1)
        assert self._drawn is not None  # made with the mask
        if nodes is None:
            fill_mask_(self._mask, self.node_dropout)
            self._drawn.fill_(self.step)
            self._whole = self.step
            return
        new = nodes[self._drawn.index_select(0, nodes) != self.step]
        if new.numel():
            self._mask.index_copy_(0, new, fill_mask_(self._mask.new_empty(new.numel(), self._mask.size(1)),
                                                     self.node_dropout))
            self._drawn.index_fill_(0, new, self.step)

    def age_sum(self) -> Tensor:
        """The summed ages (steps) of the rows pulled during the current step: a 0-d integer tensor on
        the cache's device, not read on the host ([`staleness`][pipegnn.microbatch.history.History.staleness]
        reads it)."""
        return self.ages

    def staleness(self, age_sum: float | None = None) -> float:
        """Mean age in steps of the rows pulled during the current step (0 when none); ``age_sum``:
        [`age_sum`][pipegnn.microbatch.history.History.age_sum] already read on the host (else read here: a
        wait for the device)."""
        count = sum(self._pulled.values())
        if not count:
            return 0.0
        return (read_on_host(self.age_sum()) if age_sum is None else age_sum) / count

    def traffic(self, age_sum: float | None = None) -> dict[str, float]:
        """The training step's rows (and bytes) pulled from and pushed to this cache, and the pulled rows'
        mean age ([`staleness`][pipegnn.microbatch.history.History.staleness], given ``age_sum``)."""
        pulled = sum(self._pulled.values())
        pushed = sum(self._pushed.values())
        row = self.rows.size(1) * self.rows.element_size()
        return {"staleness": self.staleness(age_sum), "pulled_rows": pulled, "pushed_rows": pushed,
                "pulled_bytes": pulled * row, "pushed_bytes": pushed * row}
