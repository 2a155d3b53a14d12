"""A feature matrix that is not in memory, as a model sees it:
[`FeatureMeta`][pipegnn.data.features.matrix.FeatureMeta] describes it (shape, dtype and, on disk, its store's
folder), [`FeatureRows`][pipegnn.data.features.matrix.FeatureRows] reads its rows on demand from any PyG
``FeatureStore``. Both are shaped like a Tensor (``shape``, ``dtype``, ``to(dtype)``)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore

from pipegnn.config.choices import Storage, names
from pipegnn.data.features.files import ATTR, GROUP, FeatureFileError

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: ``data.features``: where the node features are kept while training.
STORAGE = names(Storage)


@dataclass(frozen=True)
class FeatureMeta:
    """What a feature matrix holds and, when it is on disk, where: shaped like the matrix (``shape``,
    ``dtype``, ``to(dtype)``), so that a model can be sized from it before its rows are available.

    Attributes:
        rows, cols: nodes and features per node.
        dtype: element type.
        folder: the [`DiskFeatureStore`][pipegnn.data.features.store.DiskFeatureStore] folder holding it
            (group ``node``, attr ``x``), or None when this process knows only the shape (a pipeline rank that
            never reads features).
    """

    rows: int
    cols: int
    dtype: torch.dtype
    folder: Path | None = None

    @property
    def shape(self) -> torch.Size:
        return torch.Size((self.rows, self.cols))

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.dtype.itemsize

    def to(self, dtype: torch.dtype) -> "FeatureMeta":
        """The same matrix as read in ``dtype`` (as ``Tensor.to``)."""
        return self if dtype == self.dtype else replace(self, dtype=dtype)


class FeatureRows:
    """The rows of one tensor of a feature store, indexed like a Tensor: ``shape``, ``dtype``,
    ``rows[ids]`` (a new CPU tensor, cast to ``dtype``) and ``to(dtype)``. What the first Transform
    unit reads its input rows from when they are not in memory; any ``FeatureStore`` works.

    Args:
        store: the feature store.
        group, attr: the tensor (default: the node features).
        dtype: rows are returned in this dtype (None: the stored one).
    """

    def __init__(self, store: FeatureStore, group: str = GROUP, attr: str = ATTR,
                 dtype: torch.dtype | None = None):
        size = store.get_tensor_size(group, attr)
        if size is None:
            raise FeatureFileError(f"{store!r} holds no tensor {group}.{attr}")
        self.store, self.group, self.attr = store, group, attr
        self.shape = torch.Size(size)
        # a zero-row read gives the stored dtype through the FeatureStore API (no data read)
        self.stored_dtype = store.get_tensor(group, attr, index=torch.empty(0, dtype=torch.long)).dtype
        self.dtype = dtype or self.stored_dtype

    def __getitem__(self, index: Tensor) -> Tensor:
        return self.store.get_tensor(self.group, self.attr, index=index).to(self.dtype)

    def to(self, dtype: torch.dtype) -> "FeatureRows":
        """The same rows, returned in ``dtype``."""
        return self if dtype == self.dtype else FeatureRows(self.store, self.group, self.attr, dtype)

    def __deepcopy__(self, memo: dict[int, Any]) -> "FeatureRows":
        return self  # a view of files, shared like the files themselves

    def __repr__(self) -> str:
        return f"FeatureRows({self.store!r}, {self.group}.{self.attr}, {tuple(self.shape)}, {self.dtype})"
