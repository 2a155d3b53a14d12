"""torch.distributed.pipelining over the staged model: one process per pipeline rank.

Each process (rank r of W, device ``engine.devices[r]``) builds the same graph, model and plans, keeps
only its own stage(s) and runs them through a torch schedule; activations and gradients travel point
to point (gloo on CPU and where ranks share a GPU, nccl on CUDA; only floating-point rows cross a
boundary, see [`pipegnn.engines.stages`][pipegnn.engines.stages]). ``train_step`` returns the loss and
``predict`` the logits on *every* rank (broadcast from the last rank), so the trainer's epoch loop is the same
for all engines.

Taken from torch as is: ``PipelineStage`` (send/receive of activations and gradients), the schedules
(``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``; evaluation runs a schedule without a
loss, which is forward-only), the split of the first stage's id tensor into micro-batches
(``tensor_split`` along dim 0) and the per-micro-batch loss. Hand-written because torch has no
equivalent:

- static shapes for micro-batches of different sizes: torch fixes every inter-stage tensor's shape
  once, so each stage pads its output rows to the largest micro-batch of the call and the next stage
  slices the real rows back out ([`StaticShapes`][pipegnn.engines.stages.StaticShapes]); labels are padded
  with ``IGNORE``;
- the exact loss (sum of cross-entropies / global labelled count, ``scale_grads=False``: torch would
  otherwise divide the gradients by the number of micro-batches);
- the stage timeline: ``PipelineStage``'s computations and the waits for its receives (``TimedStage``),
  gathered on every rank after each training step;
- a check that all ranks built the same plans and initial weights, the broadcasts, and with replicas
  (``engine.data_parallel``, over torch's ``DeviceMesh``) the share of each and the gradients' sum
  ([`pipegnn.engines.replicas`][pipegnn.engines.replicas]);
- the history caches' refresh, stage by stage across the ranks
  ([`pipegnn.engines.refresh`][pipegnn.engines.refresh]).
"""
from __future__ import annotations

import dataclasses
import hashlib
from itertools import accumulate
from typing import Any, Iterator, cast

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from pipegnn.engines.balance import stage_units
from pipegnn.engines.base import IGNORE, Engine, exact_loss
from pipegnn.engines.refresh import gather_history_traffic, refresh_stage_by_stage
from pipegnn.engines.replicas import Replicas
from pipegnn.engines.stages import StaticShapes, TimedStage, own_stages, transport_device
from pipegnn.models.base import StagedGNN
from pipegnn.models.transform import Transform
from pipegnn.timeline import Box, PipelineInfo, Timeline

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved1f1b": ScheduleInterleaved1F1B}


class PipeliningEngine(Engine):
    """This rank's part of a torch.distributed.pipelining pipeline (call inside ``process_group``).

    Args:
        model: the whole staged model with its plans attached (identical on every rank); the units
            of other ranks are removed from it, so ``model.parameters()`` are this rank's.
        device: this rank's device.
        chunks: micro-batches per call.
        schedule: ``gpipe``, ``1f1b`` or ``interleaved1f1b``.
        per_stage: units per stage (stage s runs on rank ``s % world``; more stages than ranks with
            ``interleaved1f1b``).
        timeline: record the stage timeline of every training step.
        balance_source, unit_costs: how the balance was chosen, for the record.
        data_parallel: pipeline replicas D (the world is D x pipeline ranks; global rank
            ``replica * ranks + r`` is rank r of its replica): each replica runs ``chunks / D`` of a
            step's micro-batches (a contiguous share), and the gradients are summed over the replicas'
            ``dp`` dimension of a `DeviceMesh` once per step (the
            loss is already divided by the global labelled count, so the sum is the exact gradient);
            see [`Replicas`][pipegnn.engines.replicas.Replicas].
    """

    #: a once-per-step first transform runs inside the first stage's micro-batches (torch's schedules
    #: never recompute a forward: each row is transformed once, with its graph)
    lazy_first = True

    def __init__(self, model: StagedGNN, device: torch.device, chunks: int, schedule: str,
                 per_stage: list[int], timeline: bool = True, balance_source: str = "config",
                 unit_costs: dict[str, float] | None = None, data_parallel: int = 1):
        self.replicas = Replicas(data_parallel, device)
        ranks, rank = self.replicas.ranks, self.replicas.rank
        self.devices = [device]
        self.chunks, self.schedule_name = chunks // data_parallel, schedule
        self.units = stage_units(per_stage)
        self.num_stages = len(self.units)
        self.local = [s for s in range(self.num_stages) if s % ranks == rank]
        self.last_rank = (self.num_stages - 1) % ranks
        _check_same_everywhere(model)
        self.shapes = StaticShapes(model)
        # The timeline's stages: every replica's, replica by replica; lane = global rank.
        lanes = self.replicas.lanes(self.num_stages)
        self.info = self._describe(model.unit_names, schedule, chunks, lanes, device, balance_source,
                                   unit_costs)
        self.transport = transport_device(device, self.replicas.pipeline_group)
        self.modules = own_stages(model, self.units, self.local, self.shapes, device, self.transport)
        # stage 0's first unit: the model's, a transform
        self.first = cast(Transform, self.modules[0].units[0]) if 0 in self.modules else None
        self._schedules: dict[tuple, Any] = {}
        self._num_targets = 1
        if timeline:
            dist.barrier()  # every rank counts time from the same moment
            index = self.replicas.index
            mine = lanes[index * self.num_stages:(index + 1) * self.num_stages]
            self.timeline = Timeline([device] * self.num_stages, mine)
            self.timeline.set_origin()

    def _describe(self, names: list[str], schedule: str, chunks: int, lanes: list[int],
                  device: torch.device, balance_source: str,
                  unit_costs: dict[str, float] | None) -> PipelineInfo:
        """The pipeline as the record describes it: every replica's stages and their units, lanes,
        devices, schedule and balance."""
        ranks, count = self.replicas.ranks, self.replicas.count
        processes = ranks * count
        return PipelineInfo("pipelining", schedule, chunks,
                            [[f"{p}{n}" for n in names[r.start:r.stop]]
                             for p in self.replicas.prefixes for r in self.units],
                            lanes, [f"rank{r}:{device.type}" for r in lanes],
                            overlap_possible=processes > 1,
                            overlap_note=None if processes > 1 else "one process",
                            balance_source=balance_source, unit_costs_s=unit_costs,
                            per_lane=self.num_stages // ranks, replicas=count)

    @property
    def has_first(self) -> bool:
        return 0 in self.local

    @property
    def has_last(self) -> bool:
        return self.num_stages - 1 in self.local

    def redraw(self, model: StagedGNN, ids: Tensor) -> None:
        """New micro-batches ``ids`` (sampled halos): every rank's units' rows are gathered (a rank holds
        only its own units, while a stage's input and the logits take another rank's), and the schedules
        over them are rebuilt on next use, padded to the new largest micro-batch."""
        own = [i for s in self.local for i in self.units[s]]
        mine = {i: [list(rows) for rows, _ in unit.outputs()] for i, unit in zip(own, model, strict=True)}
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        for rows_by_unit in every:
            for i, outputs in rows_by_unit.items():
                for known, rows in zip(self.shapes.rows[i], outputs):
                    known[:] = rows  # in place: the stages hold these lists
        changed = set(ids.tolist())
        self._schedules = {key: value for key, value in self._schedules.items() if changed.isdisjoint(key[0])}

    def _loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return exact_loss(logits, labels, self._num_targets)

    def _schedule(self, ids: list[int], train: bool) -> Any:
        """The schedule of the micro-batches ``ids``, built on first use (same order on every rank)."""
        key = (tuple(ids), train)
        if key not in self._schedules:
            self.shapes.pad_to_largest(ids)
            self._schedules[key] = self._build_schedule(list(ids), train)
        return self._schedules[key]

    def _build_schedule(self, order: list[int], train: bool) -> Any:
        """The schedule of micro-batches ``order``: every tensor between two stages is floating point
        (the rows), on the transport device; the first stage's root argument is its id tensor."""
        m = order[0]
        ids = torch.zeros(1, dtype=torch.float32, device="meta")
        stages = []
        for s in self.local:
            first, last = self.units[s].start, self.units[s].stop - 1
            inputs = (ids,) if s == 0 else self.shapes.meta(first - 1, m, train)
            outputs = self.shapes.meta(last, m, train)
            stages.append(TimedStage(self.modules[s], s, self.num_stages, self.transport, input_args=inputs,
                                     output_args=outputs[0] if s == self.num_stages - 1 else outputs,
                                     group=self.replicas.pipeline_group, order=order,
                                     timeline=self.timeline))
        if train:
            kind = SCHEDULES[self.schedule_name]
        else:  # forward only
            kind = ScheduleInterleaved1F1B if len(stages) > 1 else ScheduleGPipe
        return kind(stages if len(stages) > 1 else stages[0], self.chunks,
                    loss_fn=self._loss if train else None, scale_grads=False)

    def _args(self, ids: Tensor) -> tuple[Tensor, ...]:
        return (ids.to(self.transport, torch.float32),) if self.has_first else ()

    def train_step(self, ids: Tensor, labels: Tensor, num_targets: int) -> float:
        ids, shares = self.replicas.share(ids, self.chunks, self.shapes.rows[-1][0])
        labels = self.replicas.own(labels, shares)
        order = ids.tolist()
        schedule = self._schedule(order, train=True)
        self._num_targets = num_targets
        total = torch.zeros((), device=self.devices[0])
        if self.timeline is not None:
            self.timeline.begin()
        self.begin_first(ids)
        if self.has_last:
            # labels of each micro-batch, padded with IGNORE
            sizes = [self.shapes.logit_rows(m) for m in order]
            target = torch.full((len(order), self.shapes.pad[-1][0][order[0]]), IGNORE, dtype=labels.dtype,
                                device=labels.device)
            for i, (n, start) in enumerate(zip(sizes, accumulate([0, *sizes]))):
                target[i, :n] = labels[start:start + n]
            losses: list[Tensor] = []
            schedule.step(*self._args(ids), target=target.view(-1), losses=losses, return_outputs=False)
            total = torch.stack(losses).sum().detach().to(total.dtype)
        else:
            schedule.step(*self._args(ids), return_outputs=False)
        self.end_first()
        if self.timeline is not None:
            self.timeline.recording = False  # the broadcast below is not part of the pipeline
        self.replicas.reduce_gradients([p for m in self.modules.values() for p in m.parameters()])
        self.replicas.broadcast(total, self.last_rank)
        self.replicas.sum(total)
        return float(total)

    def step_boxes(self) -> list[Box] | None:
        """Every rank's boxes of the last training step (a collective: call on all ranks)."""
        if self.timeline is None:
            return None
        offset = self.replicas.index * self.num_stages  # the timeline's stages: replica after replica
        mine = [dataclasses.replace(b, stage=b.stage + offset) for b in self.timeline.end()]
        ranks: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, mine)
        return sorted((b for boxes in ranks for b in boxes), key=lambda b: (b.start, b.stage))

    def outputs(self, ids: Tensor) -> Iterator[Tensor]:
        """The logits of ``ids``'s micro-batches in one piece (forward only; on every rank)."""
        yield self.predict(ids)

    @torch.no_grad()
    def predict(self, ids: Tensor) -> Tensor:
        """The logits of ``ids``'s micro-batches on every rank: each replica runs its share forward only,
        and with replicas the shares are all-gathered (padded to the largest) in ``ids``' order."""
        ids, shares = self.replicas.share(ids, self.chunks, self.shapes.rows[-1][0])
        order = ids.tolist()
        schedule = self._schedule(order, train=False)
        self.begin_first(ids)
        out = schedule.step(*self._args(ids))
        self.end_first()
        rows, parts = [self.shapes.logit_rows(m) for m in order], []
        if self.has_last:
            padded = out.view(len(order), self.shapes.pad[-1][0][order[0]], -1)
            parts = [padded[i, :n] for i, n in enumerate(rows)]
        logits = self._from_last(parts, sum(rows))
        return self.replicas.gather(logits, shares, self.transport, self.devices[0])

    def _from_last(self, parts: list[Tensor], rows: int) -> Tensor:
        """The logits the last stage's rank holds (``parts``, ``rows`` in all) on every rank of the
        replica."""
        dtype = self.shapes.dtype
        logits = (torch.cat(parts).to(dtype) if self.has_last
                  else torch.empty(rows, self.shapes.width[-1][0], dtype=dtype, device=self.devices[0]))
        self.replicas.broadcast(logits, self.last_rank)
        return logits

    @torch.no_grad()
    def refresh(self, model: StagedGNN, ids: Tensor) -> Tensor:
        """Layer-wise inference stage by stage (historical halos), refreshing every rank's history caches
        ([`refresh_stage_by_stage`][pipegnn.engines.refresh.refresh_stage_by_stage]: no process holds more
        than its own layers). Returns the logits on every rank."""
        parts = refresh_stage_by_stage(ids, self.first, self.modules, self.units, self.shapes, self.replicas)
        return self._from_last(parts, sum(self.shapes.logit_rows(m) for m in ids.tolist()))

    def history_traffic(self, model: StagedGNN) -> dict[str, dict[str, float]]:
        """Every cache's traffic of the step, by unit name as in ``info.stage_units`` (``replica<d>:``
        before it with replicas: each replica's caches are its own)."""
        return gather_history_traffic(model, self.replicas)


def _check_same_everywhere(model: StagedGNN) -> None:
    """Every rank must have built the same micro-batches and initial weights (same seeds, same library
    versions); compare digests across ranks and fail clearly otherwise."""
    digest = hashlib.sha1()
    for unit in model:
        digest.update(repr(unit.rows).encode())
        edges = getattr(unit, "edges", ())  # a propagation's
        for i in range(len(edges)):
            digest.update(edges[i].cpu().numpy().tobytes())
        for p in unit.parameters():
            digest.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    digests: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(digests, digest.hexdigest())
    if len(set(digests)) > 1:
        raise RuntimeError(f"pipeline ranks built different micro-batch plans or initial weights "
                           f"(digests {digests}); every rank needs the same config, seed and library "
                           "versions")
