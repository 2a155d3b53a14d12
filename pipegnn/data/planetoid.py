"""Planetoid citation graphs (Cora, CiteSeer, PubMed) through PyG's own ``Planetoid`` loader, and
PubMed's real topology with random features (``pubmed_topology``) through PyG's raw-file readers."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid
from torch_geometric.io.planetoid import edge_index_from_dict, read_file
from torch_geometric.utils import index_to_mask

from pipegnn.data.graph import Graph
from pipegnn.errors import DatasetUnavailable

__all__ = ["PLANETOID_NAMES", "PUBMED_TOPOLOGY_FILES", "load_planetoid", "load_pubmed_topology",
           "raw_file_names"]

log = logging.getLogger(__name__)

#: pipegnn dataset name -> PyG's Planetoid name (also the folder name under a data root).
PLANETOID_NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
#: The raw PubMed files pubmed_topology reads: graph, labels and split, not the features.
PUBMED_TOPOLOGY_FILES = tuple(f"ind.pubmed.{part}" for part in ("y", "ty", "ally", "graph", "test.index"))
PUBMED_FEATURES = 500  # width of PubMed's TF-IDF features


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


def load_pubmed_topology(root: str | Path | None, cache: str | Path, seed: int = 0) -> Graph:
    """PubMed's real graph, labels and public split with seeded random features of PubMed's width.

    For timing, partition and halo statistics only, never for accuracy: the features are random
    (row-normalised uniform noise) because the shared raw files lack ``ind.pubmed.allx``. Nodes are
    ordered as PyG's ``read_planetoid_data`` orders them (the ``allx`` nodes, then the test nodes in
    ``test.index`` order); edges are PyG's (``edge_index_from_dict``: coalesced, self-loops removed,
    88,648 directed edges).

    Args:
        root: folder holding ``PubMed-partial/raw`` or ``PubMed/raw`` (read, never written to), or None.
        cache: the data cache; ``<cache>/PubMed/raw`` is used when ``dataset=pubmed`` downloaded it.
        seed: seed of the random features.

    Raises:
        DatasetUnavailable: the graph, label or split files are in none of those folders.
    """
    folders = [Path(root) / sub / "raw" for sub in ("PubMed-partial", "PubMed")] if root else []
    folders.append(Path(cache) / "PubMed" / "raw")
    folder = next((f for f in folders if all((f / name).is_file() for name in PUBMED_TOPOLOGY_FILES)),
                  None)
    if folder is None:
        raise DatasetUnavailable(
            f"dataset 'pubmed_topology': raw files {list(PUBMED_TOPOLOGY_FILES)} are missing (looked in "
            f"{', '.join(str(f) for f in folders)}). Download them from {Planetoid.url} and put them in "
            f"<data.root>/PubMed/raw/ (or set $PIPEGNN_DATA to that data root), or run once with "
            f"dataset=pubmed on a machine with internet.")
    log.warning("pubmed_topology: PubMed's real graph, labels and split with RANDOM features (seed %d): "
                "use it for timing, partition and halo statistics, never for accuracy", seed)
    y, ty, ally = (read_file(str(folder), "pubmed", part) for part in ("y", "ty", "ally"))
    graph, test_index = (read_file(str(folder), "pubmed", part) for part in ("graph", "test.index"))
    # As read_planetoid_data: labels of allx nodes then test nodes, test rows moved to their ids.
    labels = torch.cat([ally, ty]).max(dim=1)[1]
    labels[test_index] = labels[test_index.sort()[0]]
    n = labels.numel()
    edge_index = edge_index_from_dict(graph, num_nodes=n)
    train = index_to_mask(torch.arange(y.size(0)), size=n)
    val = index_to_mask(torch.arange(y.size(0), y.size(0) + 500), size=n)
    test = index_to_mask(test_index, size=n)
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, PUBMED_FEATURES, generator=g)
    x /= x.sum(1, keepdim=True)
    return Graph(name="pubmed_topology", x=x, y=labels, edge_index=edge_index, train_mask=train,
                 val_mask=val, test_mask=test, num_classes=int(ally.size(1)))
