"""The node features the first unit reads ([`FeatureSource`][pipegnn.models.feature_source.FeatureSource]): in
memory, out of core, or only described, and which of their rows each micro-batch reads."""
from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from pipegnn.data.features import FeatureMeta
from pipegnn.microbatch.halo import MicroBatch
from pipegnn.models.units import TensorList
from pipegnn.sparse import csr_rows, is_csr

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


class FeatureSource(nn.Module):
    """The node features of a model's first unit, a child module of it (its buffers move with it).

    Args:
        x: the features (see [`set`][pipegnn.models.feature_source.FeatureSource.set]).
        unit: the name of the unit that reads them (for errors).

    Attributes:
        features: the features ``[N, F]`` in memory (a non-persistent buffer), else None.
        stored: a source of their rows out of core, else None.
        nodes: global ids of each micro-batch's input rows (non-persistent buffers).
    """

    features: Tensor | None

    def __init__(self, x: Any, unit: str):
        super().__init__()
        self.unit = unit
        self.register_buffer("features", None, persistent=False)
        self.stored: Any = None
        self.nodes: TensorList[Tensor] = TensorList()
        self.set(x)

    def set(self, x: Any) -> None:
        """Read the features ``x``: a Tensor ``[N, F]`` (kept as a buffer, moved with the unit), a source
        of rows out of core (``x[ids]`` returns a CPU tensor, e.g.
        [`pipegnn.data.features.FeatureRows`][pipegnn.data.features.FeatureRows]), or only their description
        ([`pipegnn.data.features.FeatureMeta`][pipegnn.data.features.FeatureMeta]: rows given later, or never,
        on a pipeline rank without this unit). The micro-batches' ids stay."""
        self.features = x if isinstance(x, Tensor) else None
        self.stored = None if isinstance(x, (Tensor, FeatureMeta)) else x

    def add_micro_batch(self, mb: MicroBatch) -> None:
        self.set_micro_batch(len(self.nodes), mb)

    def set_micro_batch(self, m: int, mb: MicroBatch) -> None:
        """Micro-batch ``m`` reads the rows of ``mb.nodes`` (replaced, or appended at ``len(nodes)``)."""
        self.nodes[m] = mb.nodes

    def rows(self, index: Tensor, distinct: bool = False) -> Tensor:
        """The feature rows of node ids ``index``, on ``index``'s device (the unit's: the ids are its
        buffers, or made from them). ``distinct``: ``index`` holds distinct ids in ascending order, so
        as many as the nodes are all of them, which in memory needs no copy.

        Raises:
            RuntimeError: only the features' description is here.
        """
        features = self.features
        if features is not None:
            if distinct and index.numel() == features.size(0):
                return features
            return csr_rows(features, index) if is_csr(features) else features[index]
        if self.stored is None:
            raise RuntimeError(f"{self.unit} holds no features here (only their shape): give it rows with "
                               "add_features first")
        return self.stored[index.cpu()].to(index.device)
