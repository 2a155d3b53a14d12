"""The first layer's transform once per step ([`StepTransform`][pipegnn.models.step_transform.StepTransform]):
the step's transformed rows, shared by its micro-batches, and their bookkeeping."""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from pipegnn.models.units import TensorList

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Transformed rows of distinct node ids (in ascending order when they are all the nodes).
RowTransform = Callable[[Tensor], Tensor]


class StepTransform(nn.Module):
    """The first unit's transform run once per step instead of once per micro-batch, a child module of
    the unit.

    Its input (the features) does not depend on the micro-batch, so every row any of the step's
    micro-batches reads is dropped out and transformed once (one dropout mask per node and step, as in
    full-graph training), the micro-batches gather their rows from a detached copy of the result (the
    shared rows), and the gradient they accumulate there flows back through the transform once
    ([`end`][pipegnn.models.step_transform.StepTransform.end]). In a pipeline the rows are transformed lazily,
    each when the first micro-batch that reads it runs, so that the first stage's other micro-batches need not
    wait for them all.

    The transform itself is the unit's, given as ``transform``: node ids to their transformed rows.
    """

    def __init__(self) -> None:
        super().__init__()
        self._gathers: dict[tuple, tuple[Tensor, dict[int, Tensor], list[int]]] = {}
        self._order: Tensor | None = None  # this step's rows (global ids) in the order they are transformed
        self._shared: Tensor | None = None  # their transformed rows (a leaf while training)
        self._pieces: list[tuple[Tensor, int, int]] = []  # rows transformed at once, with their graph
        self._index: dict[int, Tensor] = {}  # micro-batch id -> its rows in _shared
        self._ends: dict[int, int] = {}  # micro-batch id -> rows transformed once it has run
        self._done = 0

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> "StepTransform":
        self._gathers.clear()  # index tensors live on the old device
        return super()._apply(fn, *args, **kwargs)

    def forget(self) -> None:
        """Forget the rows gathered per set of micro-batches (their nodes changed)."""
        self._gathers.clear()

    def _gather(self, nodes: TensorList[Tensor], ids: list[int],
                by_first_use: bool) -> tuple[Tensor, dict[int, Tensor], list[int]]:
        """The distinct rows micro-batches ``ids`` read (``nodes``: each micro-batch's), per micro-batch
        where its rows are among them, and per micro-batch (in ``ids``' order) how many of the rows it
        and those before it need (built once per set of micro-batches). The rows are in ascending order
        or, ``by_first_use``, grouped by the first micro-batch that reads them (ascending within a
        group)."""
        key = (tuple(ids), by_first_use)
        if key not in self._gathers:
            read = [nodes[m] for m in ids]
            sizes = [r.numel() for r in read]
            rows, inverse = torch.unique(torch.cat(read), return_inverse=True)
            first = torch.zeros_like(rows)
            if by_first_use:
                reader = torch.repeat_interleave(torch.arange(len(ids), device=rows.device),
                                                 torch.tensor(sizes, device=rows.device))
                first.fill_(len(ids)).scatter_reduce_(0, inverse, reader, "amin")
            first, order = torch.sort(first, stable=True)
            position = torch.empty_like(order).scatter_(0, order,
                                                        torch.arange(order.numel(), device=order.device))
            ends = torch.bincount(first, minlength=len(ids)).cumsum(0).tolist()
            self._gathers[key] = rows[order], dict(zip(ids, position[inverse].split(sizes))), ends
        return self._gathers[key]

    def begin(self, nodes: TensorList[Tensor], ids: list[int], transform: RowTransform,
              lazily: bool = False) -> int:
        """Start a step of micro-batches ``ids`` (``nodes``: each micro-batch's input rows): transform
        every row they read now or, ``lazily``, each row when the first micro-batch that reads it runs
        ([`rows`][pipegnn.models.step_transform.StepTransform.rows]); while training with gradients, keep the
        graph for [`end`][pipegnn.models.step_transform.StepTransform.end]. Returns the rows the step
        transforms."""
        self._order, self._index, ends = self._gather(nodes, ids, by_first_use=lazily)
        self._ends = dict(zip(ids, ends))
        self._done, self._pieces, self._shared = 0, [], None
        if not lazily:
            self._transform(self._order.numel(), transform)
        return self._order.numel()

    def _transform(self, end: int, transform: RowTransform) -> None:
        """Transform the step's rows up to ``end`` (in `_gather`'s order) not yet transformed."""
        if end <= self._done:
            return
        assert self._order is not None  # begin
        h = transform(self._order[self._done:end])
        if self._shared is None:  # a leaf the micro-batches gather from; their gradients accumulate in it
            self._shared = h.new_empty(self._order.numel(), h.size(1)).requires_grad_(h.requires_grad)
        with torch.no_grad():
            self._shared[self._done:end] = h
        if h.requires_grad:
            self._pieces.append((h, self._done, end))
        self._done = end

    def rows(self, m: int, transform: RowTransform) -> Tensor:
        """Micro-batch ``m``'s transformed rows, gathered from the shared rows (those it is the first to
        read transformed first).

        Raises:
            RuntimeError: the step has not begun
                ([`begin`][pipegnn.models.step_transform.StepTransform.begin]).
        """
        if self._order is None:
            raise RuntimeError("first-layer transform once per step: call begin_step(ids) before "
                               "running the micro-batches")
        self._transform(self._ends[m], transform)
        assert self._shared is not None  # made by the step's first transform
        return self._shared.index_select(0, self._index[m])

    def end(self) -> None:
        """Back-propagate the gradient the micro-batches accumulated in the shared rows through the
        transform (once per row), and forget the step's rows."""
        if self._pieces and self._shared is not None and self._shared.grad is not None:
            grad = self._shared.grad
            torch.autograd.backward([h for h, _, _ in self._pieces], [grad[a:b] for _, a, b in self._pieces])
        self._shared, self._order, self._pieces, self._index, self._ends = None, None, [], {}, {}
