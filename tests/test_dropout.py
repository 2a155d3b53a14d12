"""pipegnn.dropout: masks distributed as torch's dropout, its gradient, and where torch's is used."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pipegnn.dropout import dropout, fill_mask_


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.1, 0.6])
def test_mask_takes_torch_values_and_rate(dtype: torch.dtype, p: float) -> None:
    """Entries are 0 or 1 / (1 - p) (the value torch's dropout scales by), kept at rate 1 - p: with
    200k entries the kept share's standard deviation is about 0.001, so 0.01 is ten of them."""
    torch.manual_seed(0)
    mask = fill_mask_(torch.empty(1000, 200, dtype=dtype), p)
    scale = torch.ones((), dtype=dtype) / (1 - p)
    assert set(mask.unique().tolist()) == {0.0, float(scale)}
    assert abs(float((mask != 0).double().mean()) - (1 - p)) < 0.01
    reference = F.dropout(torch.ones(1000, 200, dtype=dtype), p, True)  # torch's own scale, same dtype
    assert float(reference.max()) == float(scale)


def test_dropout_gradient_is_the_mask_and_seeds_reproduce() -> None:
    """The gradient of sum(dropout(x)) is the mask itself; the same seed draws the same mask, another
    seed another; columns are independent (not one mask per row)."""
    x = torch.randn(300, 64, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, 0.5)
    y.sum().backward()
    mask = x.grad
    torch.testing.assert_close(y, x.detach() * mask)
    torch.manual_seed(3)
    torch.testing.assert_close(dropout(x, 0.5), y)
    torch.manual_seed(4)
    assert not torch.equal(dropout(x, 0.5) != 0, mask != 0)
    assert not torch.equal(mask[:, 0], mask[:, 1])


def test_dropout_passes_through_and_falls_back() -> None:
    """Not training or p = 0: the tensor itself; p = 1: zeros; bfloat16 goes to torch's dropout (its
    uniform numbers are too coarse), which keeps the dtype and torch's scale."""
    x = torch.randn(50, 8)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    half = dropout(torch.ones(400, 50, dtype=torch.bfloat16), 0.5)
    assert half.dtype == torch.bfloat16 and set(half.unique().tolist()) == {0.0, 2.0}
