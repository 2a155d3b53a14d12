"""Dropout whose mask comes from uniform random numbers: the models' dropout and the history caches'
per-node masks.

Written by hand because torch's CPU dropout draws its mask with ``bernoulli_``, 2.4-4.4x slower here
than uniform numbers compared with the keep probability (a 19717 x 64 float32 mask, one thread: 14.1 ms
against 3.8 ms; ``F.dropout`` of those rows 14.9 ms against 4.8 ms; ``results/benchmarks/dropout.txt``):
at one dropout per layer that was a quarter of a 16-layer GCNII's full-batch epoch. Masks are
distributed as torch's (0 with probability ``p``, else ``1 / (1 - p)``, independently per entry) and
drawn from the same generator, so seeds keep runs reproducible; on other devices (CUDA's dropout is
one fused kernel) and in other dtypes (a half-precision uniform number is too coarse to compare),
`torch.nn.functional.dropout` is used as it is.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

#: dtypes whose uniform numbers are fine enough to compare with the keep probability
FINE = (torch.float32, torch.float64)


def fill_mask_(mask: Tensor, p: float) -> Tensor:
    """Fill ``mask`` in place with a dropout mask of probability ``p`` (0 <= p < 1): each entry 0 with
    probability ``p``, else ``1 / (1 - p)``; returns ``mask``."""
    keep = 1 - p
    if mask.device.type == "cpu" and mask.dtype in FINE:
        return mask.uniform_().lt_(keep).div_(keep)
    return mask.bernoulli_(keep).div_(keep)


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """`torch.nn.functional.dropout` of ``x`` (not in place), its mask from
    [`fill_mask_`][pipegnn.dropout.fill_mask_] on the CPU in float32 and float64."""
    if not training or p <= 0:
        return x
    if p >= 1 or x.device.type != "cpu" or x.dtype not in FINE:
        return F.dropout(x, p, training)
    return x * fill_mask_(torch.empty_like(x), p)
