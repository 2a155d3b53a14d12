"""Where a pipeline's stage boundaries fall: ``engine.balance`` in layers or units, or ``auto``.

A model of L layers is 2L units (``transform<l>``, ``propagate<l>``, see
[`pipegnn.models.base`][pipegnn.models.base]), and GCNII's input and output Linear are two more; stage
boundaries may fall between any two units. ``engine.balance`` is

- null: units as even as possible over the stages;
- a list summing to ``model.layers``: whole layers per stage (each layer is its two units, the first
  layer with an input Linear and the last with an output Linear where the model has them);
- a list summing to the number of units: units per stage (a boundary may cut a layer);
- ``auto``: boundaries chosen from each unit's forward + backward time, measured on a few training
  micro-batches before training ([`measure_unit_costs`][pipegnn.engines.balance.measure_unit_costs]), as the
  contiguous partition whose busiest stage is cheapest
  ([`auto_balance`][pipegnn.engines.balance.auto_balance]). Moving activations between stages is not counted:
  every boundary sends a layer's transformed or propagated rows, of similar size. Per-node dropout masks
  (``microbatch.halo_dropout=node``) are a cost of the pipelining engine's first stage
  only: it draws them inside its micro-batches, the others while they wait for their first
  ([`mask_draw_costs`][pipegnn.engines.balance.mask_draw_costs]).

Written here rather than taken from torchgpipe: its ``balance_by_time`` profiles one sample batch that
it splits like any tensor, while a micro-batch here is selected by its id and micro-batches differ in
size (so the units are timed over several of them); and its partition solver
(``torchgpipe.balance.balance_cost``, Bárány et al.'s approximation) stops once the largest block is
within one element of the smallest, which is far from the best split for a handful of uneven units
(it splits costs ``[10, 1, 1, 1]`` into ``[2, 2]``). An exact min-max partition of a few dozen units is
a small dynamic programme.
"""
from __future__ import annotations

import statistics
import time
from itertools import accumulate
from typing import Any, Sequence

import torch
from torch import Tensor

from pipegnn.errors import ConfigError
from pipegnn.microbatch.current import computing
from pipegnn.models.base import StagedGNN

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

AUTO = "auto"


def even_balance(num_units: int, parts: int) -> list[int]:
    """Units per part, as even as possible (earlier parts take the remainder)."""
    base, extra = divmod(num_units, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def unit_balance(balance: Any, layer_units: list[int], parts: int, what: str = "device") -> list[int] | None:
    """``engine.balance`` as units per part (None for null or ``auto``), for a model whose layers have
    ``layer_units`` units each.

    Raises:
        ConfigError: not ``parts`` positive integers summing to the number of layers or of units, and
            not null or ``auto``.
    """
    num_layers, units = len(layer_units), sum(layer_units)
    if balance is None or balance == AUTO:
        return None
    entries = list(balance) if isinstance(balance, (list, tuple)) else None
    ok = (entries is not None and len(entries) == parts
          and all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in entries)
          and sum(entries) in (num_layers, units))
    if not ok:
        raise ConfigError(f"engine.balance={balance!r} does not match the model: it needs one positive "
                          f"entry per {what} ({parts} {what}{'es' if what.endswith('s') else 's'}) "
                          f"summing to model.layers={num_layers} "
                          f"(whole layers) or to {units} (units: a transform and a propagation per "
                          f"layer{', and the input and output Linear' if units > 2 * num_layers else ''}), "
                          "or null (even) or auto (measured)")
    assert entries is not None  # ok
    if sum(entries) == units:
        return entries
    ends = list(accumulate(entries))
    return [sum(layer_units[a:b]) for a, b in zip([0, *ends], ends)]


def measure_unit_costs(model: StagedGNN, ids: Tensor, device: torch.device, passes: int = 2,
                       micro_batches: int = 4, lazy_first: bool = False) -> list[float]:
    """Seconds of forward + backward of every unit for one micro-batch: the median over ``passes``
    timed passes (after one warm-up pass) of the mean over the first ``micro_batches`` of ``ids``. A
    first-layer transform that runs once per step is not counted (it is no per-micro-batch cost)
    unless it runs lazily (``lazy_first``, as in the pipelining engine, inside the first stage's
    micro-batches): then the first unit's cost has the whole step's transform forward (``ids``' rows)
    spread over the step's micro-batches (the first ``micro_batches`` are the first to read most rows,
    so their own share would overstate it; the transform's backward runs once, after the last one).

    Per-node dropout masks are drawn before each pass, so no unit's time has them (see
    [`mask_draw_costs`][pipegnn.engines.balance.mask_draw_costs]). Each unit runs on the previous unit's
    detached output, as torchgpipe's profiler does. The model is moved to ``device`` and left there; the
    random number generators and parameter gradients are as before (so a run with ``balance=auto`` trains
    exactly as with the balance it chose).
    """
    model.to(device)
    was_training = model.training
    model.train()
    chosen = ids[:micro_batches].tolist()
    cuda = [device] if device.type == "cuda" else []
    samples: list[list[float]] = [[] for _ in model]
    first = model.first()
    with torch.random.fork_rng(devices=cuda):
        for p in range(passes + 1):
            totals = [0.0] * len(model)
            if lazy_first and first.once_per_step:  # the step's transform, its share per micro-batch
                _sync(device)
                start = time.perf_counter()
                first.begin_step(ids.tolist())
                first.end_step()
                _sync(device)
                totals[0] = (time.perf_counter() - start) / ids.numel() * len(chosen)
            for history in model.histories():
                history.draw_masks()
            first.begin_step(chosen)  # a once-per-step first transform: not a per-micro-batch cost
            for m in chosen:
                x: tuple[Tensor, ...] = (torch.tensor([m], dtype=torch.float32, device=device,
                                                      requires_grad=True),)
                for i, unit in enumerate(model):
                    x = tuple(t.detach().requires_grad_(t.requires_grad) for t in x)
                    _sync(device)
                    start = time.perf_counter()
                    with computing(m):
                        y = unit(x)
                    outputs = [t for t in y if t.requires_grad and t.grad_fn is not None]
                    if outputs:
                        torch.autograd.backward(outputs, [torch.ones_like(t) for t in outputs])
                    _sync(device)
                    totals[i] += time.perf_counter() - start
                    x = y
            first.end_step()
            if p:  # the first pass warms up (structures, allocator)
                for i, t in enumerate(totals):
                    samples[i].append(t / len(chosen))
    for param in model.parameters():
        param.grad = None
    model.train(was_training)
    return [statistics.median(s) for s in samples]


def mask_draw_costs(model: StagedGNN, micro_batches: int, repeats: int = 3) -> list[float]:
    """Seconds per micro-batch, per unit, of drawing its cache's per-node dropout mask once a step (the
    median of ``repeats`` draws over ``micro_batches``; 0 for a unit without one). The random number
    generators are as before (on a GPU too: the masks are drawn on the cache's device)."""
    costs = [0.0] * len(model)
    for i, unit in enumerate(model):
        history = getattr(unit, "history", None)
        if history is None or not 0 < history.node_dropout < 1:
            continue
        device = history.rows.device
        times = []
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            for _ in range(repeats):
                _sync(device)
                start = time.perf_counter()
                history.draw_masks()
                _sync(device)
                times.append(time.perf_counter() - start)
        costs[i] = statistics.median(times) / micro_batches
    return costs


def auto_balance(costs: Sequence[float], parts: int, extra: Sequence[float] | None = None,
                 extra_parts: Sequence[int] = (0,)) -> list[int]:
    """Units per part (contiguous, each >= 1) that minimise the most expensive part; among equally good
    splits, the first found (earliest boundaries). A unit in one of ``extra_parts`` costs ``extra``
    more (e.g. the per-node masks only the pipeline's first stage draws inside its micro-batches).

    Raises:
        ConfigError: more parts than units.
    """
    n = len(costs)
    if parts > n:
        raise ConfigError(f"{parts} pipeline stages but the model has only {n} units")
    prefix, heavy = [0.0], [0.0]
    for c, e in zip(costs, extra or [0.0] * n):
        prefix.append(prefix[-1] + c)
        heavy.append(heavy[-1] + c + e)
    inf = float("inf")
    # best[p][i]: the cheapest busiest part splitting the first i units into p parts; cut: last boundary
    best = [[inf] * (n + 1) for _ in range(parts + 1)]
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for p in range(1, parts + 1):
        sums = heavy if p - 1 in extra_parts else prefix  # part p - 1's unit costs
        for i in range(p, n + 1):
            for j in range(p - 1, i):
                value = max(best[p - 1][j], sums[i] - sums[j])
                if value < best[p][i]:
                    best[p][i], cut[p][i] = value, j
    sizes, i = [], n
    for p in range(parts, 0, -1):
        sizes.append(i - cut[p][i])
        i = cut[p][i]
    return sizes[::-1]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def stage_units(per_stage: list[int]) -> list[range]:
    """Units of every pipeline stage, in stage order, from the units per stage; stage s runs on rank
    ``s % num_ranks``."""
    return [range(a, a + c) for a, c in zip(accumulate([0, *per_stage]), per_stage)]


def per_stage_balance(per_rank_units: list[int], per_rank: int = 1) -> list[int]:
    """Units per stage from units per rank: with ``per_rank`` > 1 (interleaving) a rank's units are
    split as evenly as possible over its ``per_rank`` stages (stage s runs on rank ``s % ranks``)."""
    ranks = len(per_rank_units)
    return [even_balance(per_rank_units[s % ranks], per_rank)[s // ranks] for s in range(ranks * per_rank)]
