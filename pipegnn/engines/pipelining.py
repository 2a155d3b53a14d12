"""torch.distributed.pipelining over the staged model: one process per pipeline rank.

Each process (rank r of W, device ``engine.devices[r]``) builds the same graph, model and plans, keeps
only its own stage(s) and runs them through a torch schedule; activations and gradients travel point
to point (gloo on CPU and where ranks share a GPU, nccl on CUDA; only floating-point rows cross a
boundary, see :mod:`pipegnn.engines.stages`). ``train_step`` returns the loss and ``predict`` the
logits on *every* rank (broadcast from the last rank), so the trainer's epoch loop is the same for all
engines.

Taken from torch as is: ``PipelineStage`` (send/receive of activations and gradients), the schedules
(``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``; evaluation runs a schedule without a
loss, which is forward-only), the split of the first stage's id tensor into micro-batches
(``tensor_split`` along dim 0) and the per-micro-batch loss. Hand-written here because torch has no
equivalent:

- static shapes for micro-batches of different sizes: torch fixes every inter-stage tensor's shape
  once, so each stage pads its output rows to the largest micro-batch of the call and the next stage
  slices the real rows back out; labels are padded with ``IGNORE``;
- the exact loss (sum of cross-entropies / global labelled count, ``scale_grads=False``: torch would
  otherwise divide the gradients by the number of micro-batches);
- the stage timeline: ``PipelineStage``'s computations and the waits for its receives (``TimedStage``),
  gathered on every rank after each training step;
- a check that all ranks built the same plans and initial weights, the broadcasts, and with replicas
  (``engine.data_parallel``, over torch's ``DeviceMesh``) the share of each and the gradients' sum.
"""
from __future__ import annotations

import dataclasses
import hashlib
from itertools import accumulate
from typing import Any, Iterator, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from pipegnn.engines.balance import stage_units
from pipegnn.engines.base import IGNORE, Engine, exact_loss
from pipegnn.engines.stages import PipeStage, TimedStage, transport_device
from pipegnn.models.base import StagedGNN, layerwise
from pipegnn.models.transform import Transform
from pipegnn.models.units import Unit
from pipegnn.timeline import Box, PipelineInfo, Timeline

__all__ = ["SCHEDULES", "PipeliningEngine"]

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
            ``dp`` dimension of a :class:`~torch.distributed.device_mesh.DeviceMesh` once per step (the
            loss is already divided by the global labelled count, so the sum is the exact gradient).
    """

    #: a once-per-step first transform runs inside the first stage's micro-batches (torch's schedules
    #: never recompute a forward: each row is transformed once, with its graph)
    lazy_first = True

    def __init__(self, model: StagedGNN, device: torch.device, chunks: int, schedule: str,
                 per_stage: list[int], timeline: bool = True, balance_source: str = "config",
                 unit_costs: dict[str, float] | None = None, data_parallel: int = 1):
        self.replicas = data_parallel
        self.world = dist.get_world_size() // data_parallel  # processes of one pipeline
        self.replica, self.rank = divmod(dist.get_rank(), self.world)
        self.pp_group = self.dp_group = None  # None: the whole world (one replica)
        if data_parallel > 1:
            mesh = init_device_mesh(device.type, (data_parallel, self.world), mesh_dim_names=("dp", "pp"))
            self.pp_group, self.dp_group = mesh.get_group("pp"), mesh.get_group("dp")
        self.devices = [device]
        self.chunks, self.schedule_name = chunks // data_parallel, schedule
        self.units = stage_units(per_stage)
        self.num_stages = len(self.units)
        self.local = [s for s in range(self.num_stages) if s % self.world == self.rank]
        self.last_rank = (self.num_stages - 1) % self.world
        _check_same_everywhere(model)
        # Every unit's output tensors (rows, [x0]): real rows per micro-batch id, width, and the padded
        # rows of the current call.
        self.rows = [[list(rows) for rows, _ in unit.outputs()] for unit in model]
        self.pad = [[[0] * len(r) for r in unit] for unit in self.rows]
        self.width = [[width for _, width in unit.outputs()] for unit in model]
        self.dtype = model.feature_dtype
        # The timeline's stages: every replica's, replica by replica; lane = global rank.
        lanes = [d * self.world + s % self.world
                 for d in range(data_parallel) for s in range(self.num_stages)]
        self.prefix = [f"replica{d}:" if data_parallel > 1 else "" for d in range(data_parallel)]
        self.info = self._describe(model.unit_names, schedule, chunks, lanes, device, balance_source,
                                   unit_costs)
        self.transport = transport_device(device, self.pp_group)
        self.modules = self._own_stages(model, device)
        # stage 0's first unit: the model's, a transform
        self.first = cast(Transform, self.modules[0].units[0]) if 0 in self.modules else None
        self._schedules: dict[tuple, Any] = {}
        self._num_targets = 1
        if timeline:
            dist.barrier()  # every rank counts time from the same moment
            mine = lanes[self.replica * self.num_stages:(self.replica + 1) * self.num_stages]
            self.timeline = Timeline([device] * self.num_stages, mine)
            self.timeline.set_origin()

    def _describe(self, names: list[str], schedule: str, chunks: int, lanes: list[int],
                  device: torch.device, balance_source: str,
                  unit_costs: dict[str, float] | None) -> PipelineInfo:
        """The pipeline as the record describes it: every replica's stages and their units, lanes,
        devices, schedule and balance."""
        processes = self.world * self.replicas
        return PipelineInfo("pipelining", schedule, chunks,
                            [[f"{p}{n}" for n in names[r.start:r.stop]]
                             for p in self.prefix for r in self.units],
                            lanes, [f"rank{r}:{device.type}" for r in lanes],
                            overlap_possible=processes > 1,
                            overlap_note=None if processes > 1 else "one process",
                            balance_source=balance_source, unit_costs_s=unit_costs,
                            per_lane=self.num_stages // self.world, replicas=self.replicas)

    def _own_stages(self, model: StagedGNN, device: torch.device) -> dict[int, PipeStage]:
        """This rank's stages as :class:`PipeStage` modules on ``device``; the other ranks' units are
        removed from ``model`` (so that its parameters are this rank's)."""
        units = list(model)
        modules = {s: PipeStage(units[self.units[s].start:self.units[s].stop],
                                None if s == 0 else self.rows[self.units[s].start - 1],
                                self.pad[self.units[s].stop - 1], s == self.num_stages - 1,
                                device, self.transport).to(device)
                   for s in self.local}
        own = {unit for s in self.local for unit in self.units[s]}
        for i in reversed(range(len(model))):
            if i not in own:
                del model[i]
        return modules

    def _global(self, rank: int) -> int:
        """The global rank of pipeline rank ``rank`` of this replica."""
        return self.replica * self.world + rank

    def _share(self, ids: Tensor) -> tuple[Tensor, list[int]]:
        """This replica's contiguous share of a call's micro-batches, and every replica's target rows."""
        if ids.numel() != self.chunks * self.replicas:
            raise ValueError(f"pipelining engine runs {self.chunks} micro-batches per call and replica "
                             f"({self.replicas} replicas), got {ids.numel()}")
        order, c = ids.tolist(), self.chunks
        rows = [sum(self.rows[-1][0][m] for m in order[d * c:(d + 1) * c]) for d in range(self.replicas)]
        return ids[self.replica * c:(self.replica + 1) * c], rows

    def _reduce_gradients(self, params: list[Tensor]) -> None:
        """Sum this rank's gradients over the replicas in one all-reduce, flattened (unused: zeros)."""
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.dp_group)
        for p, summed in zip(params, flat.split([g.numel() for g in grads])):
            p.grad = summed.view_as(p)

    @property
    def has_first(self) -> bool:
        return 0 in self.local

    @property
    def has_last(self) -> bool:
        return self.num_stages - 1 in self.local

    def _loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return exact_loss(logits, labels, self._num_targets)

    def _schedule(self, ids: list[int], train: bool) -> Any:
        """The schedule of the micro-batches ``ids``, built on first use (same order on every rank)."""
        key = (tuple(ids), train)
        if key not in self._schedules:
            for unit_rows, unit_pad in zip(self.rows, self.pad):
                for rows, pad in zip(unit_rows, unit_pad):
                    largest = max(rows[m] for m in ids)
                    for m in ids:
                        pad[m] = largest
            self._schedules[key] = self._build_schedule(list(ids), train)
        return self._schedules[key]

    def _build_schedule(self, order: list[int], train: bool) -> Any:
        """The schedule of micro-batches ``order``: every tensor between two stages is floating point
        (the rows), on the transport device; the first stage's root argument is its id tensor."""
        m = order[0]
        ids = torch.zeros(1, dtype=torch.float32, device="meta")

        def activations(unit: int) -> tuple[Tensor, ...]:
            return tuple(torch.empty(pad[m], width, dtype=self.dtype, device="meta", requires_grad=train)
                         for pad, width in zip(self.pad[unit], self.width[unit]))

        stages = []
        for s in self.local:
            first, last = self.units[s].start, self.units[s].stop - 1
            inputs = (ids,) if s == 0 else activations(first - 1)
            outputs = activations(last)[0] if s == self.num_stages - 1 else activations(last)
            stages.append(TimedStage(self.modules[s], s, self.num_stages, self.transport, input_args=inputs,
                                     output_args=outputs, group=self.pp_group, order=order,
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
        ids, rows = self._share(ids)
        before = sum(rows[:self.replica])  # this replica's labels: its micro-batches' rows among everyone's
        labels = labels[before:before + rows[self.replica]]
        order = ids.tolist()
        schedule = self._schedule(order, train=True)
        self._num_targets = num_targets
        total = torch.zeros((), device=self.devices[0])
        if self.timeline is not None:
            self.timeline.begin()
        self.begin_first(ids)
        if self.has_last:
            sizes = [self.rows[-1][0][m] for m in order]  # labels of each micro-batch, padded with IGNORE
            target = torch.full((len(order), self.pad[-1][0][order[0]]), IGNORE, dtype=labels.dtype,
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
        if self.replicas > 1:
            self._reduce_gradients([p for m in self.modules.values() for p in m.parameters()])
        dist.broadcast(total, src=self._global(self.last_rank), group=self.pp_group)
        if self.replicas > 1:
            dist.all_reduce(total, group=self.dp_group)
        return float(total)

    def step_boxes(self) -> list[Box] | None:
        """Every rank's boxes of the last training step (a collective: call on all ranks)."""
        if self.timeline is None:
            return None
        offset = self.replica * self.num_stages  # the timeline's stages: replica after replica
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
        ids, shares = self._share(ids)
        order = ids.tolist()
        schedule = self._schedule(order, train=False)
        self.begin_first(ids)
        out = schedule.step(*self._args(ids))
        self.end_first()
        rows, parts = [self.rows[-1][0][m] for m in order], []
        if self.has_last:
            padded = out.view(len(order), self.pad[-1][0][order[0]], -1)
            parts = [padded[i, :n] for i, n in enumerate(rows)]
        logits = self._from_last(parts, sum(rows))
        if self.replicas == 1:
            return logits
        padded = F.pad(logits, (0, 0, 0, max(shares) - logits.size(0))).to(self.transport)
        gathered = [torch.empty_like(padded) for _ in shares]
        dist.all_gather(gathered, padded.contiguous(), group=self.dp_group)
        return torch.cat([part[:n] for part, n in zip(gathered, shares)]).to(self.devices[0])

    def _from_last(self, parts: list[Tensor], rows: int) -> Tensor:
        """The logits the last stage's rank holds (``parts``, ``rows`` in all) on every rank of the
        replica."""
        logits = (torch.cat(parts).to(self.dtype) if self.has_last
                  else torch.empty(rows, self.width[-1][0], dtype=self.dtype, device=self.devices[0]))
        dist.broadcast(logits, src=self._global(self.last_rank), group=self.pp_group)
        return logits

    @torch.no_grad()
    def refresh(self, model: StagedGNN, ids: Tensor) -> Tensor:
        """Layer-wise inference stage by stage (historical halos): each stage runs its units over all of
        ``ids``'s micro-batches (:func:`~pipegnn.models.base.layerwise`, which also refreshes its
        history caches) and sends every output to the next stage's rank in one message per tensor,
        so no process holds more than its own layers. Returns the logits on every rank. Every replica
        refreshes over all of ``ids`` (so all replicas' caches hold the same rows after it: during
        training each replica's caches get only its own micro-batches' pushes, one step of extra
        staleness for the others' rows, which the staleness figures count)."""
        order, first = ids.tolist(), self.first  # first: set where this rank has stage 0
        if first is not None:
            first.begin_step(order)
        carried: list[tuple[Tensor, ...]] = [() for _ in order]
        for s in range(self.num_stages):
            rank, before = s % self.world, (s - 1) % self.world
            if rank != self.rank:
                continue
            if s > 0 and before != self.rank:
                carried = self._receive(self.units[s].start - 1, order, before)
            carried = layerwise(cast(list[Unit], list(self.modules[s].units)), ids, carried)
            after = (s + 1) % self.world
            if s + 1 < self.num_stages and after != self.rank:
                for tensor in zip(*carried):
                    sent = torch.cat(tensor).to(self.transport, self.dtype).contiguous()
                    dist.send(sent, dst=self._global(after))
        if first is not None:
            first.end_step()
        return self._from_last([out[0] for out in carried] if self.has_last else [],
                               sum(self.rows[-1][0][m] for m in order))

    def history_traffic(self, model: StagedGNN) -> dict[str, dict[str, float]]:
        """Every cache's traffic of the step, by unit name as in ``info.stage_units`` (``replica<d>:``
        before it with replicas: each replica's caches are its own)."""
        ranks: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, model.history_traffic())
        return {f"{self.prefix[r // self.world]}{name}": t
                for r, traffic in enumerate(ranks) for name, t in traffic.items()}

    def _receive(self, unit: int, order: list[int], src: int) -> list[tuple[Tensor, ...]]:
        """Unit ``unit``'s outputs for the micro-batches ``order``, sent by rank ``src`` (one message
        per tensor, the micro-batches' rows one after another)."""
        tensors = []
        for rows, width in zip(self.rows[unit], self.width[unit]):
            sizes = [rows[m] for m in order]
            buffer = torch.empty(sum(sizes), width, dtype=self.dtype, device=self.transport)
            dist.recv(buffer, src=self._global(src))
            tensors.append(buffer.to(self.devices[0]).split(sizes))
        return list(zip(*tensors))


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
