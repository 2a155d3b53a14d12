"""The framework-neutral graph every other module reads."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Graph"]


@dataclass
class Graph:
    """A node-classification graph.

    Attributes:
        name: dataset name, for records and messages.
        x: node features ``[N, F]`` (float32).
        y: node labels ``[N]`` (int64).
        edge_index: directed edges ``[2, E]`` as (source, target), coalesced.
        train_mask, val_mask, test_mask: boolean split masks ``[N]``.
        num_classes: number of label classes.
    """

    name: str
    x: Tensor
    y: Tensor
    edge_index: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    num_classes: int

    @property
    def num_nodes(self) -> int:
        return int(self.x.size(0))

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.size(1))

    @property
    def num_features(self) -> int:
        return int(self.x.size(1))

    def split(self, name: str) -> Tensor:
        """Node ids of split ``name`` (``train``, ``val``, ``test`` or ``all``), ascending."""
        if name == "all":
            return torch.arange(self.num_nodes)
        masks = {"train": self.train_mask, "val": self.val_mask, "test": self.test_mask}
        if name not in masks:
            raise ValueError(f"unknown split {name!r}; valid: train, val, test, all")
        return masks[name].nonzero().view(-1)

    def structure_hash(self) -> str:
        """Short hash of the topology and splits (keys plan caches and records)."""
        h = hashlib.sha1()
        for t in (self.edge_index, self.train_mask, self.val_mask, self.test_mask):
            h.update(t.contiguous().numpy().tobytes())
        h.update(str(self.num_nodes).encode())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return (f"Graph({self.name}: {self.num_nodes} nodes, {self.num_edges} edges, "
                f"{self.num_features} features, {self.num_classes} classes, "
                f"train/val/test {int(self.train_mask.sum())}/{int(self.val_mask.sum())}/"
                f"{int(self.test_mask.sum())})")
