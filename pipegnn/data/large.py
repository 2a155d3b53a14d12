"""Large real graphs from their raw files: ogbn-arxiv and ogbn-products (CSV files, read with ogb's
``read_graph_pyg`` and pandas), Reddit (two ``.npz`` files, read as PyG's ``Reddit`` reads them).

No ogb or PyG dataset class is used: they read their ``processed/*.pt`` (and ``pre_transform.pt``)
files with ``torch.load(weights_only=False)``, so a crafted file in a writable cache would run code.
Raw files are read in place from the data root (never copied), else from the cache, where missing ones
are downloaded. None of them can carry code: CSV text and ``.npz`` archives read with
``allow_pickle=False``. The graph built from them is kept in ``<cache>/<folder>/processed/`` as plain
tensors ([`pipegnn.data.graph.save_graph`][pipegnn.data.graph.save_graph], read back with
``weights_only=True``); delete that file to rebuild it. A cache that cannot be written is no error: the graph
is built in memory (one warning). A download that fails becomes one
[`DatasetUnavailable`][pipegnn.errors.DatasetUnavailable] naming the files, the URL and the folder to put them
in.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch_geometric.utils import coalesce, index_to_mask, to_undirected

from pipegnn.data.download import download_timeout, first_complete, unavailable, unreadable
from pipegnn.data.graph import GRAPH_FILE, Graph, load_saved_graph, save_graph, staging_folder
from pipegnn.errors import DatasetUnavailable

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

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
#: Download URL of each OGB dataset (ogb's master.csv). Tests point them at a closed port.
OGB_URLS = {
    "ogbn-arxiv": "http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip",
    "ogbn-products": "http://snap.stanford.edu/ogb/data/nodeproppred/products.zip",
}
#: The two raw files PyG's ``Reddit`` reads (inside reddit.zip).
REDDIT_FILES = ("reddit_data.npz", "reddit_graph.npz")


def load_large(name: str, root: str | Path | None, cache_dir: str | Path) -> Graph:
    """Load ``ogbn-arxiv``, ``ogbn-products`` or ``reddit`` (see [`load_ogb`][pipegnn.data.large.load_ogb],
    [`load_reddit`][pipegnn.data.large.load_reddit])."""
    if name in OGB_DATASETS:
        return load_ogb(name, root, cache_dir)
    if name == "reddit":
        return load_reddit(root, cache_dir)
    raise ValueError(f"unknown large dataset {name!r}; valid: {', '.join(OGB_DATASETS)}, reddit")


def load_ogb(name: str, root: str | Path | None, cache_dir: str | Path) -> Graph:
    """Load an OGB node-property dataset with its official split, as ogb's PyG loader builds it.

    Files (ogb's layout: ``raw/*.csv.gz``, ``split/<split>/*.csv.gz``) are read in place from
    ``root/<folder>`` (``root/ogbn_arxiv``, or the zip's ``root/arxiv``; never written to), else from
    ``cache_dir/<folder>``, where they are downloaded when missing. arxiv gets reverse edges
    (undirected, as is customary); labels are flattened and the split indices become masks. The graph
    is kept in ``cache_dir/<folder>/processed/`` and read from there on later loads.

    Raises:
        DatasetUnavailable: files neither in ``root`` nor in the cache and the download failed, or
            they cannot be read.
    """
    spec = OGB_DATASETS[name]
    dest = Path(cache_dir) / spec.folder
    saved = dest / "processed" / GRAPH_FILE
    graph = load_saved_graph(saved, name)
    if graph is not None:
        return graph
    meta = _ogb_meta(name)
    files = spec.files()
    sources = [Path(root) / f for f in (spec.folder, spec.zip_folder)] if root else []
    url = OGB_URLS[name]
    with contextlib.ExitStack() as stack:
        folder = first_complete([*sources, dest], files)
        writable = True
        if folder is None:
            missing = [f for f in files if not (dest / f).is_file()]
            log.info("%s: files %s missing from %s, downloading from %s", name, missing, dest, url)
            try:
                with download_timeout():
                    folder, writable = _download_ogb(name, url, meta, dest, files, stack)
            except (OSError, RuntimeError, EOFError) as e:
                # OSError: URLError and socket errors; RuntimeError: ogb's "Stopped downloading" and a
                # declined download; EOFError: ogb's download confirmation prompt (> 1 GB) without stdin.
                raise unavailable(name, missing, sources + [dest], url, e,
                                   f"unzip it and put its contents in <data.root>/{spec.folder}/ (raw/ "
                                   f"and split/{spec.split}/ directly inside)") from e
        try:
            graph = _read_ogb(name, spec, meta, folder)
        except (OSError, ValueError, RuntimeError, EOFError) as e:
            raise unreadable(name, folder, url, e) from e
    if writable:
        save_graph(graph, saved)
    return graph


def _read_ogb(name: str, spec: OgbDataset, meta, folder: Path) -> Graph:
    """The graph in ogb's raw CSV files under ``folder`` (what ogb's ``PygNodePropPredDataset.process``
    and ``get_idx_split`` read), without ogb's processed files."""
    import pandas as pd
    from ogb.io.read_graph_pyg import read_graph_pyg

    def extra(key: str) -> list[str]:
        return [] if meta[key] == "None" else meta[key].split(",")

    def csv(path: Path) -> np.ndarray:
        return pd.read_csv(path, compression="gzip", header=None).values

    data = read_graph_pyg(str(folder / "raw"), add_inverse_edge=meta["add_inverse_edge"] == "True",
                          additional_node_files=extra("additional node files"),
                          additional_edge_files=extra("additional edge files"))[0]
    labels = csv(folder / "raw" / "node-label.csv.gz")
    n = int(data.num_nodes)
    edge_index = data.edge_index
    edge_index = (to_undirected(edge_index, num_nodes=n) if spec.undirected
                  else coalesce(edge_index, num_nodes=n))
    split = folder / "split" / spec.split
    masks = [index_to_mask(torch.from_numpy(csv(split / f"{part}.csv.gz").T[0]).to(torch.long), size=n)
             for part in ("train", "valid", "test")]
    return Graph(name=name, x=data.x.float(), y=torch.from_numpy(labels).view(-1).long(),
                 edge_index=edge_index, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2],
                 num_classes=int(meta["num classes"]))


def _download_ogb(name: str, url: str, meta, dest: Path, files: list[str],
                  stack: contextlib.ExitStack) -> tuple[Path, bool]:
    """Download and unzip ``url``; move ``files`` into ``dest`` when it can be written. Returns the
    folder holding them and whether it is ``dest``."""
    from ogb.utils.url import decide_download, download_url, extract_zip

    staging, writable = staging_folder(dest, stack, name)
    if not decide_download(url):  # asks on stdin before downloading more than 1 GB
        raise RuntimeError("download declined")
    extract_zip(download_url(url, str(staging)), str(staging))
    unpacked = staging / str(meta["download_name"])
    if not writable:
        return unpacked, False
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        os.replace(unpacked / f, dest / f)
    return dest, True


def load_reddit(root: str | Path | None, cache_dir: str | Path) -> Graph:
    """Load Reddit (GraphSAGE's split) as PyG's ``Reddit`` loader builds it.

    The two ``.npz`` files are read in place from ``root/Reddit/raw`` (or ``root/Reddit``; never
    written to), else from ``cache_dir/Reddit/raw``, where they are downloaded when missing. The graph
    is kept in ``cache_dir/Reddit/processed/`` and read from there on later loads.

    Raises:
        DatasetUnavailable: files neither in ``root`` nor in the cache and the download failed, or
            they cannot be read.
    """
    from torch_geometric.datasets import Reddit  # for its URL only

    dest = Path(cache_dir) / "Reddit"
    saved = dest / "processed" / GRAPH_FILE
    graph = load_saved_graph(saved, "reddit")
    if graph is not None:
        return graph
    sources = [Path(root) / "Reddit" / "raw", Path(root) / "Reddit"] if root else []
    raw = dest / "raw"
    with contextlib.ExitStack() as stack:
        folder = first_complete([*sources, raw], list(REDDIT_FILES))
        writable = True
        if folder is None:
            missing = [f"raw/{f}" for f in REDDIT_FILES if not (raw / f).is_file()]
            log.info("reddit: files %s missing from %s, downloading from %s", missing, dest, Reddit.url)
            try:
                with download_timeout():
                    folder, writable = _download_reddit(Reddit.url, raw, stack)
            except OSError as e:  # URLError and socket errors are OSErrors
                raise unavailable("reddit", missing, sources + [raw], Reddit.url, e,
                                   "put the two .npz files inside it in <data.root>/Reddit/raw/") from e
        try:
            graph = _read_reddit(folder)
        except (OSError, ValueError, KeyError, RuntimeError, EOFError) as e:
            raise unreadable("reddit", folder, Reddit.url, e) from e
    if writable:
        save_graph(graph, saved)
    return graph


def _read_reddit(folder: Path) -> Graph:
    """The graph in Reddit's two ``.npz`` files (what PyG's ``Reddit.process`` reads), without pickles."""
    import scipy.sparse as sp

    with np.load(folder / "reddit_data.npz", allow_pickle=False) as data:
        x = torch.from_numpy(data["feature"]).to(torch.float)
        y = torch.from_numpy(data["label"]).to(torch.long)
        split = torch.from_numpy(data["node_types"])
    adj = sp.load_npz(folder / "reddit_graph.npz").tocoo()  # scipy reads with allow_pickle=False
    edge_index = torch.stack([torch.from_numpy(adj.row).to(torch.long),
                              torch.from_numpy(adj.col).to(torch.long)], dim=0)
    edge_index = coalesce(edge_index, num_nodes=x.size(0))
    return Graph(name="reddit", x=x, y=y, edge_index=edge_index, train_mask=split == 1,
                 val_mask=split == 2, test_mask=split == 3, num_classes=int(y.max()) + 1)


def _download_reddit(url: str, raw: Path, stack: contextlib.ExitStack) -> tuple[Path, bool]:
    """Download and unzip ``url``; move the two files into ``raw`` when it can be written. Returns the
    folder holding them and whether it is ``raw``."""
    from torch_geometric.data import download_url, extract_zip

    staging, writable = staging_folder(raw, stack, "reddit")
    extract_zip(download_url(url, str(staging), log=False), str(staging), log=False)
    if not writable:
        return staging, False
    for f in REDDIT_FILES:
        os.replace(staging / f, raw / f)
    return raw, True


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
