"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own ``Planetoid`` loader."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

from pipegnn.data.graph import Graph
from pipegnn.errors import DatasetUnavailable

__all__ = ["PLANETOID_NAMES", "load_planetoid", "raw_file_names"]

log = logging.getLogger(__name__)

#: pipegnn dataset name -> PyG's Planetoid name (also the folder name under a data root).
PLANETOID_NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def raw_file_names(name: str) -> list[str]:
    """The eight raw Planetoid files of dataset ``name`` (e.g. ``ind.cora.x``)."""
    return [f"ind.{name}.{part}" for part in _PARTS]


def load_planetoid(name: str, root: str | Path | None, cache: str | Path) -> Graph:
    """Load a Planetoid dataset with its public split and row-normalised features.

    Raw files are copied from ``root/<Name>/raw`` (a read-only source, e.g. ``../shared/datasets``)
    into ``cache/<Name>/raw``; PyG processes them there, and downloads them when they are missing.

    Args:
        name: ``cora``, ``citeseer`` or ``pubmed``.
        root: folder holding ``<Name>/raw/ind.<name>.*`` (never written to), or None.
        cache: writable folder for PyG's raw/processed files.

    Raises:
        DatasetUnavailable: the files are neither in ``root`` nor in the cache and cannot be downloaded.
    """
    pyg_name = PLANETOID_NAMES[name]
    files = raw_file_names(name)
    raw_dir = Path(cache) / pyg_name / "raw"
    source = Path(root) / pyg_name / "raw" if root else None
    if source is not None and all((source / f).is_file() for f in files):
        raw_dir.mkdir(parents=True, exist_ok=True)
        for f in files:
            if not (raw_dir / f).is_file():
                shutil.copyfile(source / f, raw_dir / f)
    missing = [f for f in files if not (raw_dir / f).is_file()]
    if missing:
        log.info("%s: raw files missing from %s, downloading from %s", pyg_name, raw_dir, Planetoid.url)
    try:
        # Row-normalised features, as in the GCN and GAT papers' setups.
        data = Planetoid(str(cache), pyg_name, transform=T.NormalizeFeatures())[0]
    except OSError as e:  # URLError and socket errors are OSErrors
        looked = " and ".join(str(p) for p in (source, raw_dir) if p is not None)
        raise DatasetUnavailable(
            f"dataset {name!r}: raw files {missing} are missing (looked in {looked}) "
            f"and the download from {Planetoid.url} failed ({e}). Download them and put them in "
            f"<data.root>/{pyg_name}/raw/ (or set $PIPEGNN_DATA to that data root).") from e
    return Graph(name=name, x=data.x.float(), y=data.y, edge_index=data.edge_index,
                 train_mask=data.train_mask, val_mask=data.val_mask, test_mask=data.test_mask,
                 num_classes=int(data.y.max()) + 1)
