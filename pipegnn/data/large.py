"""Large real graphs through their own loaders: ogbn-arxiv and ogbn-products through ogb's
``PygNodePropPredDataset``, Reddit through PyG's ``Reddit``.

As for Planetoid, raw files are copied from a read-only data root into the writable cache, in the
layout each loader expects, and the loader processes them there (or downloads them when they are
missing). A download that fails becomes one :class:`DatasetUnavailable` naming the files, the URL and
the folder to put them in.
"""
from __future__ import annotations

import contextlib
import logging
import shutil
import socket
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Iterator

import torch
from torch_geometric.utils import coalesce, index_to_mask, to_undirected

from pipegnn.data.graph import Graph
from pipegnn.errors import DatasetUnavailable

__all__ = ["OGB_DATASETS", "OGB_URLS", "REDDIT_FILES", "load_large", "load_ogb",
           "load_reddit"]

log = logging.getLogger(__name__)

#: Seconds a download may wait on one connect or read before it counts as failed (offline machines
#: whose firewall drops packets would otherwise hang for minutes).
DOWNLOAD_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class OgbDataset:
    """Where one OGB node-property dataset lives and which of its files the loader reads.

    Attributes:
        folder: ogb's dataset folder under its root (``ogbn_arxiv``); also the folder under data.root.
        zip_folder: the folder the downloaded zip unpacks to (``arxiv``), also accepted under data.root.
        raw: files under ``raw/``.
        split: ogb's split name; its files are ``split/<split>/{train,valid,test}.csv.gz``.
        undirected: add reverse edges (arxiv's citations are directed; products already has both).
    """

    folder: str
    zip_folder: str
    raw: tuple[str, ...]
    split: str
    undirected: bool

    def files(self) -> list[str]:
        """Paths of every file the loader reads, relative to the dataset folder."""
        return ([f"raw/{f}" for f in self.raw]
                + [f"split/{self.split}/{part}.csv.gz" for part in ("train", "valid", "test")])


_OGB_RAW = ("edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz", "num-node-list.csv.gz",
            "num-edge-list.csv.gz")
OGB_DATASETS = {
    "ogbn-arxiv": OgbDataset("ogbn_arxiv", "arxiv", (*_OGB_RAW, "node_year.csv.gz"), "time",
                             undirected=True),
    "ogbn-products": OgbDataset("ogbn_products", "products", _OGB_RAW, "sales_ranking",
                                undirected=False),
}
#: Download URL of each OGB dataset (ogb's master.csv); ogb downloads from here. Tests point them at
#: a closed port.
OGB_URLS = {
    "ogbn-arxiv": "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip",
    "ogbn-products": "http://snap.stanford.edu/ogb/data/nodeproppred/products.zip",
}
#: The two raw files PyG's ``Reddit`` reads (inside reddit.zip).
REDDIT_FILES = ("reddit_data.npz", "reddit_graph.npz")


def load_large(name: str, root: str | Path | None, cache_dir: str | Path) -> Graph:
    """Load ``ogbn-arxiv``, ``ogbn-products`` or ``reddit`` (see :func:`load_ogb`, :func:`load_reddit`)."""
    if name in OGB_DATASETS:
        return load_ogb(name, root, cache_dir)
    if name == "reddit":
        return load_reddit(root, cache_dir)
    raise ValueError(f"unknown large dataset {name!r}; valid: {', '.join(OGB_DATASETS)}, reddit")


def load_ogb(name: str, root: str | Path | None, cache_dir: str | Path) -> Graph:
    """Load an OGB node-property dataset with its official split, through ogb's PyG loader.

    Files are copied from ``root/<folder>`` (``root/ogbn_arxiv``, or the zip's ``root/arxiv``; never
    written to) into ``cache_dir/<folder>`` (ogb's layout: ``raw/*.csv.gz``, ``split/<split>/*.csv.gz``)
    and processed there. arxiv gets reverse edges (undirected, as is customary); labels are flattened
    and the split indices become masks.

    Raises:
        DatasetUnavailable: files neither in ``root`` nor in the cache and the download failed.
    """
    spec = OGB_DATASETS[name]
    dest = Path(cache_dir) / spec.folder
    files = spec.files()
    sources = [Path(root) / f for f in (spec.folder, spec.zip_folder)] if root else []
    _copy_first_complete(sources, dest, files)
    missing = [f for f in files if not (dest / f).is_file()]
    meta = _ogb_meta(name)
    dest.mkdir(parents=True, exist_ok=True)
    # ogb asks on stdin whether to delete a dataset folder without its release marker; ours is current.
    (dest / f"RELEASE_v{meta['version']}.txt").touch()
    url = OGB_URLS[name]
    if missing:
        log.info("%s: files %s missing from %s, downloading from %s", name, missing, dest, url)
    try:
        with _download_timeout(), _pyg_safe_globals():
            dataset = _ogb_class()(name, root=str(cache_dir))
            split = dataset.get_idx_split()
        data = dataset[0]
    except (OSError, RuntimeError, EOFError, SystemExit) as e:
        # OSError: URLError, socket errors and missing files; RuntimeError: ogb's "Stopped downloading"
        # and "No necessary file"; EOFError/SystemExit: ogb's download confirmation prompt (> 1 GB).
        raise _unavailable(name, missing, sources + [dest], url, e,
                           f"unzip it and put its contents in <data.root>/{spec.folder}/ (raw/ and "
                           f"split/{spec.split}/ directly inside)") from e
    n = int(data.num_nodes)
    edge_index = data.edge_index
    edge_index = (to_undirected(edge_index, num_nodes=n) if spec.undirected
                  else coalesce(edge_index, num_nodes=n))
    masks = [index_to_mask(split[part].view(-1), size=n) for part in ("train", "valid", "test")]
    return Graph(name=name, x=data.x.float(), y=data.y.view(-1).long(), edge_index=edge_index,
                 train_mask=masks[0], val_mask=masks[1], test_mask=masks[2],
                 num_classes=int(dataset.num_classes))


def load_reddit(root: str | Path | None, cache_dir: str | Path) -> Graph:
    """Load Reddit (GraphSAGE's split) through PyG's ``Reddit`` loader.

    Files are copied from ``root/Reddit/raw`` (or ``root/Reddit``; never written to) into
    ``cache_dir/Reddit/raw``, PyG's layout, and processed there.

    Raises:
        DatasetUnavailable: files neither in ``root`` nor in the cache and the download failed.
    """
    from torch_geometric.datasets import Reddit

    dest = Path(cache_dir) / "Reddit"
    files = [f"raw/{f}" for f in REDDIT_FILES]
    sources = [Path(root) / "Reddit" / "raw", Path(root) / "Reddit"] if root else []
    _copy_first_complete(sources, dest / "raw", list(REDDIT_FILES))
    missing = [f for f in files if not (dest / f).is_file()]
    if missing:
        log.info("reddit: files %s missing from %s, downloading from %s", missing, dest, Reddit.url)
    try:
        with _download_timeout():
            data = Reddit(str(dest))[0]
    except OSError as e:  # URLError and socket errors are OSErrors
        raise _unavailable("reddit", missing, sources + [dest / "raw"], Reddit.url, e,
                           "put the two .npz files inside it in <data.root>/Reddit/raw/") from e
    return Graph(name="reddit", x=data.x.float(), y=data.y.long(), edge_index=data.edge_index,
                 train_mask=data.train_mask, val_mask=data.val_mask, test_mask=data.test_mask,
                 num_classes=int(data.y.max()) + 1)


def _copy_first_complete(sources: list[Path], dest: Path, files: list[str]) -> None:
    """Copy ``files`` missing from ``dest`` out of the first source folder that holds all of them."""
    for source in sources:
        if all((source / f).is_file() for f in files):
            for f in files:
                if not (dest / f).is_file():
                    (dest / f).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source / f, dest / f)
            return


def _unavailable(name: str, missing: list[str], looked: list[Path], url: str, error: BaseException,
                 how: str) -> DatasetUnavailable:
    where = ", ".join(str(p) for p in looked)
    what = f"files {missing} are missing (looked in {where})" if missing else \
        f"its files in {looked[-1]} could not be read"
    return DatasetUnavailable(
        f"dataset {name!r}: {what} and the download from {url} failed ({type(error).__name__}: "
        f"{error}). Download {url}, {how}; or set $PIPEGNN_DATA / data.root to the folder holding it.")


@contextlib.contextmanager
def _download_timeout(seconds: float = DOWNLOAD_TIMEOUT_S) -> Iterator[None]:
    """Bound every socket wait of a download (urllib uses the global default timeout)."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds if previous is None else previous)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def _pyg_safe_globals() -> contextlib.AbstractContextManager:
    """Let ogb's plain ``torch.load`` (weights_only by default since torch 2.6) read back the PyG
    ``Data`` it saved into our own cache: allow the storage classes PyG does not register itself."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    return torch.serialization.safe_globals([DataEdgeAttr, DataTensorAttr, GlobalStorage])


def _ogb_meta(name: str):  # -> pandas.Series
    """ogb's own record of dataset ``name`` (version, URL, split, ...) from its master.csv."""
    import pandas as pd
    try:
        import ogb.nodeproppred
    except ImportError as e:
        raise DatasetUnavailable(f"dataset {name!r} is loaded through the ogb package, which is not "
                                 f"installed ({e}); install the ogb pin of requirements.txt") from e

    master = Path(ogb.nodeproppred.__file__).parent / "master.csv"
    return pd.read_csv(master, index_col=0, keep_default_na=False)[name]


@cache
def _ogb_class() -> type:
    """ogb's PygNodePropPredDataset, downloading from :data:`OGB_URLS` (imported on first use: ogb
    also imports scikit-learn)."""
    from ogb.nodeproppred import PygNodePropPredDataset

    class OgbNodePropPred(PygNodePropPredDataset):
        def download(self) -> None:
            self.meta_info = self.meta_info.copy()
            self.meta_info["url"] = OGB_URLS[self.name]
            super().download()

    return OgbNodePropPred
