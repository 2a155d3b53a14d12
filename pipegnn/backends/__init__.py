"""Framework adapters: everything framework-specific lives in one adapter per framework.

An adapter provides five methods (see [`Backend`][pipegnn.backends.Backend]); staging, engines and the trainer
call only these and never branch on the framework. The DGL adapter is imported only when asked for, so
PyG-only runs do not pay DGL's import time.

Aggregation (``model.aggregation``): an adapter is made for one choice (``get_backend(name,
aggregation)``, or ``backend.with_aggregation(...)``), and its ``structure`` builds each micro-batch
block in the form that choice needs, once per device:

- ``messages``: the framework's message-passing path. PyG gathers one message row per edge
  (``[E, F]``, ``[E, heads, F]`` for GAT) and scatters them onto the targets.
- ``sparse``: no per-edge message tensor. PyG GCN and SAGE get the block as a ``torch.sparse`` CSR
  adjacency ``[num_dst, num_src]`` holding the edge weights (ones for SAGE) and aggregate with a
  sparse-dense matmul (``message_and_aggregate``: a weighted sum, a mean). PyG GAT has no such path
  (attention needs per-edge values).
- DGL: GraphConv, SAGEConv and GATConv always run DGL's fused kernels (g-SpMM / g-SDDMM: no ``[E, F]`` message
  tensor; GAT keeps only its ``[E, heads]`` attention scores), whichever value is chosen; DGL has no
  per-edge-message path for its built-in layers, so both values run the same code.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from pipegnn.backends.base import AGGREGATIONS, KINDS, Adapter, aggregations, check_aggregation
from pipegnn.backends.pyg import PygBackend
from pipegnn.config.choices import FrameworkName, names
from pipegnn.errors import check_choice
from pipegnn.models.spec import LayerSpec

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

FRAMEWORKS = names(FrameworkName)


class Backend(Protocol):
    """What a framework adapter provides (an adapter object is made for one aggregation choice)."""

    name: str
    aggregation: str

    def with_aggregation(self, aggregation: str) -> "Backend":
        """The same framework's adapter for another ``model.aggregation`` choice."""

    @staticmethod
    def computation_graph(kind: str, edge_index: Tensor, num_nodes: int,
                          dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor | None]:
        """Full-graph edges (self-loops, normalisation weights of ``dtype``) that model ``kind`` reads
        (ConfigError if ``kind`` is not one of `KINDS`)."""

    def conv(self, kind: str, spec: LayerSpec) -> nn.Module:
        """The framework's own layer for one LayerSpec (ConfigError if ``kind`` is not one of
        `KINDS` or the aggregation is not available for it)."""

    @staticmethod
    def split(conv: nn.Module) -> tuple[nn.Module, nn.Module]:
        """``(transform, rest)``: the layer's own node-wise dense transform (its parameters) and the
        layer without it, which computes the whole layer's output from transformed rows."""

    def structure(self, edge_index: Tensor, edge_weight: Tensor | None, num_src: int, num_dst: int) -> Any:
        """A micro-batch block in the framework's form for this aggregation, built once per device from
        local edges."""

    @staticmethod
    def apply(conv: nn.Module, h: Tensor, block: Any) -> Tensor:
        """Run ``conv`` on a block; returns at least the first ``num_dst`` rows."""


def get_backend(name: str, aggregation: str = "messages") -> Backend:
    """The adapter of framework ``name`` for ``aggregation`` (``messages`` or ``sparse``).

    Raises:
        ConfigError: unknown framework or aggregation.
    """
    check_choice(name, FRAMEWORKS, "framework.name")
    if name == "dgl":
        from pipegnn.backends.dgl import DglBackend

        return DglBackend(aggregation)
    return PygBackend(aggregation)
