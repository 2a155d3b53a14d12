"""The ``pipelining`` engine's processes as D pipeline replicas x pipeline ranks (``engine.data_parallel``).

Global rank ``replica * ranks + r`` is rank r of its replica. With replicas the world is a torch
`DeviceMesh` of dimensions ``dp`` (the replicas) and ``pp`` (the
ranks of one pipeline): each replica runs a contiguous share of a step's micro-batches, and the gradients
are summed over ``dp`` once per step (the loss is already divided by the global labelled count, so the
sum is the exact gradient). With one replica the pipeline is the whole world and every sum or gather
over replicas is skipped.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.distributed.device_mesh import init_device_mesh

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


class Replicas:
    """This process's place among the pipeline replicas, and what crosses between replicas.

    Args:
        count: pipeline replicas D (``dist.get_world_size()`` must be a multiple of it).
        device: this process's device (the mesh's device type).

    Attributes:
        count: pipeline replicas.
        ranks: processes of one pipeline.
        index, rank: this process's replica, and its rank in the replica's pipeline.
        pipeline_group, replica_group: the mesh's ``pp`` and ``dp`` groups (None: the whole world, with
            one replica; the replica group is then never used).
        prefixes: per replica, what the record puts before its stages' unit names.
    """

    def __init__(self, count: int, device: torch.device):
        self.count = count
        self.ranks = dist.get_world_size() // count
        self.index, self.rank = divmod(dist.get_rank(), self.ranks)
        self.pipeline_group: dist.ProcessGroup | None = None
        self.replica_group: dist.ProcessGroup | None = None
        if count > 1:
            mesh = init_device_mesh(device.type, (count, self.ranks), mesh_dim_names=("dp", "pp"))
            self.pipeline_group, self.replica_group = mesh.get_group("pp"), mesh.get_group("dp")
        self.prefixes = [f"replica{d}:" if count > 1 else "" for d in range(count)]

    def global_rank(self, rank: int) -> int:
        """The global rank of pipeline rank ``rank`` of this replica."""
        return self.index * self.ranks + rank

    def broadcast(self, tensor: Tensor, rank: int) -> None:
        """Broadcast ``tensor`` in place from pipeline rank ``rank`` to the other ranks of this replica."""
        dist.broadcast(tensor, src=self.global_rank(rank), group=self.pipeline_group)

    def lanes(self, num_stages: int) -> list[int]:
        """The timeline's lane (global rank) of every replica's stages, replica by replica (stage s of
        ``num_stages`` runs on pipeline rank ``s % ranks``)."""
        return [d * self.ranks + s % self.ranks for d in range(self.count) for s in range(num_stages)]

    def share(self, ids: Tensor, chunks: int, rows: list[int]) -> tuple[Tensor, list[int]]:
        """This replica's contiguous share of a call's micro-batches ``ids`` (``chunks`` per replica),
        and every replica's target rows (``rows``: per micro-batch id)."""
        if ids.numel() != chunks * self.count:
            raise ValueError(f"pipelining engine runs {chunks} micro-batches per call and replica "
                             f"({self.count} replicas), got {ids.numel()}")
        order, c = ids.tolist(), chunks
        shares = [sum(rows[m] for m in order[d * c:(d + 1) * c]) for d in range(self.count)]
        return ids[self.index * c:(self.index + 1) * c], shares

    def own(self, labels: Tensor, shares: list[int]) -> Tensor:
        """This replica's labels out of a call's ``labels``: its micro-batches' rows among everyone's
        (``shares``: every replica's rows, from [`share`][pipegnn.engines.replicas.Replicas.share])."""
        before = sum(shares[:self.index])
        return labels[before:before + shares[self.index]]

    def reduce_gradients(self, params: list[Tensor]) -> None:
        """Sum this rank's gradients over the replicas in one all-reduce, flattened (unused: zeros)."""
        if self.count == 1:
            return
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.replica_group)
        for p, summed in zip(params, flat.split([g.numel() for g in grads])):
            p.grad = summed.view_as(p)

    def sum(self, total: Tensor) -> None:
        """Sum ``total`` over the replicas, in place (each replica's part of the step's loss)."""
        if self.count > 1:
            dist.all_reduce(total, group=self.replica_group)

    def gather(self, logits: Tensor, shares: list[int], transport: torch.device,
               device: torch.device) -> Tensor:
        """Every replica's ``logits`` (``shares``: its rows) in replica order, on ``device``: all-gathered
        on ``transport``, each padded to the largest share."""
        if self.count == 1:
            return logits
        padded = F.pad(logits, (0, 0, 0, max(shares) - logits.size(0))).to(transport)
        gathered = [torch.empty_like(padded) for _ in shares]
        dist.all_gather(gathered, padded.contiguous(), group=self.replica_group)
        return torch.cat([part[:n] for part, n in zip(gathered, shares)]).to(device)
