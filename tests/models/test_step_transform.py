"""The first unit's transform once per step: every row the step's micro-batches read transformed once
(all at once, or lazily at its first reader), each micro-batch's rows gathered from the shared rows, and
the gradient they accumulate there back-propagated through the transform once."""
from __future__ import annotations

import pytest
import torch
from torch import Tensor

from pipegnn.models.step_transform import StepTransform
from pipegnn.models.units import TensorList

READS = [[0, 1, 2], [2, 3], [1, 4, 0]]


def setup() -> tuple[TensorList[Tensor], Tensor, Tensor, list[list[int]], StepTransform]:
    nodes: TensorList[Tensor] = TensorList()
    for read in READS:
        nodes.append(torch.tensor(read))
    x = torch.randn(5, 3)
    weight = torch.randn(3, 2, requires_grad=True)
    return nodes, x, weight, [], StepTransform()


def test_every_row_once_then_gathered_per_micro_batch() -> None:
    nodes, x, weight, seen, step = setup()

    def transform(ids: Tensor) -> Tensor:
        seen.append(ids.tolist())
        return x[ids] @ weight

    assert step.begin(nodes, [0, 1, 2], transform) == 5
    assert seen == [[0, 1, 2, 3, 4]]
    for m, read in enumerate(READS):
        assert torch.allclose(step.rows(m, transform), x[read] @ weight)
    assert seen == [[0, 1, 2, 3, 4]]  # nothing transformed again


def test_lazily_each_row_at_its_first_reader() -> None:
    nodes, x, weight, seen, step = setup()

    def transform(ids: Tensor) -> Tensor:
        seen.append(ids.tolist())
        return x[ids] @ weight

    assert step.begin(nodes, [0, 1, 2], transform, lazily=True) == 5 and seen == []
    for m, read in enumerate(READS):
        assert torch.allclose(step.rows(m, transform), x[read] @ weight)
        assert torch.allclose(step.rows(m, transform), x[read] @ weight)  # a recomputation: no new rows
    assert seen == [[0, 1, 2], [3], [4]]


@pytest.mark.parametrize("lazily", [False, True])
def test_the_gradient_flows_back_once_per_step(lazily: bool) -> None:
    nodes, x, weight, _, step = setup()
    scale = [torch.randn(len(read), 2) for read in READS]
    expected = torch.autograd.grad(sum(((x[r] @ weight) * s).sum() for r, s in zip(READS, scale)), weight)[0]
    calls = []

    def transform(ids: Tensor) -> Tensor:
        calls.append(ids.numel())
        return x[ids] @ weight

    step.begin(nodes, [0, 1, 2], transform, lazily=lazily)
    for m, s in enumerate(scale):
        (step.rows(m, transform) * s).sum().backward()
    assert weight.grad is None  # the micro-batches' gradient waits in the shared rows
    step.end()
    assert weight.grad is not None and torch.allclose(weight.grad, expected)
    assert sum(calls) == 5


def test_rows_before_the_step_begins_fail() -> None:
    nodes, x, weight, _, step = setup()
    with pytest.raises(RuntimeError, match="call begin_step"):
        step.rows(0, lambda ids: x[ids] @ weight)
    step.begin(nodes, [0, 1, 2], lambda ids: x[ids] @ weight)
    step.end()
    with pytest.raises(RuntimeError, match="call begin_step"):
        step.rows(0, lambda ids: x[ids] @ weight)


def test_a_move_forgets_the_index_tensors_and_keeps_no_state() -> None:
    nodes, x, weight, _, step = setup()
    step.begin(nodes, [0, 1, 2], lambda ids: x[ids] @ weight)
    step.end()
    assert step._gathers  # built once per set of micro-batches
    step.to(torch.float64)  # any move: the index tensors would live on the old device
    assert not step._gathers
    assert step.state_dict() == {}
