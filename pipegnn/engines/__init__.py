"""Engines that run a staged model over micro-batches: ``single``, ``gpipe`` and ``pipelining``."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from pipegnn.config.choices import Schedule
from pipegnn.config.schema import (
    EngineConfig,
    GPipeEngineConfig,
    PipeliningEngineConfig,
    SingleEngineConfig,
    StagedEngineConfig,
)
from pipegnn.engines.balance import (
    AUTO,
    auto_balance,
    even_balance,
    mask_draw_costs,
    measure_unit_costs,
    per_stage_balance,
    stage_units,
    unit_balance,
)
from pipegnn.engines.base import IGNORE, Engine, exact_loss, parse_device
from pipegnn.engines.capture import Replayed
from pipegnn.engines.checks import check_engine
from pipegnn.engines.gpipe import GPipeEngine
from pipegnn.engines.pipelining import SCHEDULES, PipeliningEngine
from pipegnn.engines.single import SingleEngine
from pipegnn.models.base import StagedGNN

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def build_engine(engine: EngineConfig, model: StagedGNN, train_ids: Tensor) -> Engine:
    """The engine an (already validated) ``engine`` config describes (``pipelining``: this process's
    rank, inside
    [`pipegnn.training.processes.group.process_group`][pipegnn.training.processes.group.process_group]) for
    the training micro-batches ``train_ids`` (their number is the engine's chunks; timed per unit for
    ``engine.balance=auto``)."""
    chunks = train_ids.numel()
    if isinstance(engine, SingleEngineConfig):
        return SingleEngine(model, parse_device(engine.device), chunks, engine.timeline)
    if isinstance(engine, PipeliningEngineConfig):
        rank, replicas = dist.get_rank(), engine.data_parallel
        ranks = dist.get_world_size() // replicas  # processes of one pipeline
        per_rank = engine.virtual_stages if engine.schedule is Schedule("interleaved1f1b") else 1
        device = parse_device(engine.devices[rank])
        per_stage, source, costs = _balance(engine, model, ranks, per_rank, train_ids, device,
                                            measure=rank == 0, lazy_first=PipeliningEngine.lazy_first)
        if source == AUTO:  # rank 0 measured: every rank takes its balance
            shared: list[Any] = [per_stage, costs]
            dist.broadcast_object_list(shared, src=0)
            per_stage, costs = shared
        return PipeliningEngine(model, device, chunks, engine.schedule, per_stage, engine.timeline, source,
                                costs, replicas)
    assert isinstance(engine, GPipeEngineConfig), engine.name  # the three engine schemas
    devices = [parse_device(d) for d in engine.devices]
    per_stage, source, costs = _balance(engine, model, len(devices), 1, train_ids, devices[0])
    return GPipeEngine(model, devices, per_stage, chunks, engine.checkpoint, engine.timeline, source, costs)


def _balance(engine: StagedEngineConfig, model: StagedGNN, parts: int, per_part: int, train_ids: Tensor,
             device: torch.device, measure: bool = True,
             lazy_first: bool = False) -> tuple[list[int], str, dict[str, float] | None]:
    """Units per stage (``parts * per_part`` stages), how they were chosen (``auto``, ``config``,
    ``even``) and, for ``auto``, the measured seconds per unit (this process measures if ``measure``;
    ``lazy_first``: as the engine runs its first transform, see
    [`measure_unit_costs`][pipegnn.engines.balance.measure_unit_costs])."""
    balance = engine.balance
    if balance == AUTO:
        if not measure:
            return [], AUTO, None
        costs = measure_unit_costs(model, train_ids, device, lazy_first=lazy_first)
        # the pipelining engine's first rank (stages 0, parts, 2 x parts, ...) draws per-node masks in
        # its micro-batches; every other rank, and one process holding every stage, at the step's start
        extra = mask_draw_costs(model, train_ids.numel()) if lazy_first else None
        chosen = auto_balance(costs, parts * per_part, extra, range(0, parts * per_part, parts))
        return chosen, AUTO, dict(zip(model.unit_names, costs))
    units = unit_balance(balance, model.units_per_layer, parts)
    source = "config" if units is not None else "even"
    return per_stage_balance(units or even_balance(len(model), parts), per_part), source, None
