"""Framework adapters: everything framework-specific lives in one adapter per framework.

An adapter provides four static methods (see :class:`Backend`); staging, engines and the trainer call
only these and never branch on the framework. The DGL adapter is imported only when asked for, so
PyG-only runs do not pay DGL's import time.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from pipegnn.backends.pyg import PygBackend
from pipegnn.errors import ConfigError
from pipegnn.models.spec import LayerSpec

__all__ = ["FRAMEWORKS", "Backend", "get_backend"]

FRAMEWORKS = ("pyg", "dgl")


class Backend(Protocol):
    """What a framework adapter provides."""

    name: str

    @staticmethod
    def computation_graph(kind: str, edge_index: Tensor, num_nodes: int,
                          dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor | None]:
        """Full-graph edges (self-loops, normalisation weights of ``dtype``) that model ``kind`` reads."""

    @staticmethod
    def conv(kind: str, spec: LayerSpec) -> nn.Module:
        """The framework's own layer for one LayerSpec."""

    @staticmethod
    def structure(edge_index: Tensor, edge_weight: Tensor | None, num_src: int, num_dst: int) -> Any:
        """A micro-batch block in the framework's form, built once per device from local edges."""

    @staticmethod
    def apply(conv: nn.Module, h: Tensor, block: Any) -> Tensor:
        """Run ``conv`` on a block; returns at least the first ``num_dst`` rows."""


def get_backend(name: str) -> Backend:
    """The adapter of framework ``name``.

    Raises:
        ConfigError: unknown framework.
    """
    if name == "pyg":
        return PygBackend
    if name == "dgl":
        from pipegnn.backends.dgl import DglBackend

        return DglBackend
    raise ConfigError(f"unknown framework {name!r}; valid: {', '.join(FRAMEWORKS)}")
