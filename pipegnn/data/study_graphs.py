"""The co-purchase and co-authorship graphs of the GNN benchmark study ("Pitfalls of Graph Neural Network
Evaluation", arXiv:1811.05868): ``amazon_computers``, ``amazon_photo``, ``coauthor_cs`` and
``coauthor_physics``, read from the study's ``.npz`` files (the files PyG's ``Amazon`` and ``Coauthor``
download) and built with the study's protocol.

Files: ``<data.root>/<Family>/<Name>/raw/<file>.npz`` (PyG's layout; read in place, never written to), else
``<data.cache>/<Family>/<Name>/raw/``, where a missing file is downloaded. A file is read with
``allow_pickle=False`` and only its numeric arrays (the adjacency and attribute CSR matrices, the labels):
every array's declared shape is checked against its size in the archive and against the others (node
counts, index ranges, row pointers) before anything is allocated, and the dense features' size against
the memory available, so a damaged, truncated or crafted file is one
[`DatasetUnavailable`][pipegnn.errors.DatasetUnavailable] before training; so is the file of another of these
graphs put in place of this one.

The graph is the study's standardised one (its ``standardize``): unweighted, undirected, without self
loops, its largest connected component; features binary bag-of-words (a count becomes 1), dense float32.
It is cached as plain tensors ([`pipegnn.data.graph.save_graph`][pipegnn.data.graph.save_graph], read back
with ``weights_only=True``, checksummed) under ``processed/<the raw file's sha256>/``, so a replaced raw file
is never shadowed by the graph of the old one. The graphs have no standard split: each run draws its
own (``dataset.split``, ``dataset.split_seed``; [`pipegnn.data.splits`][pipegnn.data.splits]).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components

from pipegnn.config.schema import StudyGraphConfig
from pipegnn.data.download import download_timeout, first_complete, unavailable, unreadable
from pipegnn.data.graph import GRAPH_FILE, Graph, load_saved_graph, save_graph, staging_folder
from pipegnn.data.splits import draw_split
from pipegnn.errors import DatasetUnavailable
from pipegnn.measure import allocatable_bytes

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

#: Where PyG's ``Amazon`` and ``Coauthor`` download the study's files from (the study's repository).
STUDY_URL = "https://github.com/shchur/gnn-benchmark/raw/master/data/npz"


@dataclass(frozen=True)
class StudyFile:
    """One of the study's graphs: its folder under a data root, its file, and the published file's shape
    (nodes, features, classes, as PyG documents them) that tells one graph's file from another's."""

    family: str
    folder: str
    file: str
    nodes: int
    features: int
    classes: int

    @property
    def raw(self) -> Path:
        """The file's path under a data root or the cache."""
        return Path(self.family) / self.folder / "raw" / self.file


STUDY_FILES = {
    "amazon_computers": StudyFile("Amazon", "Computers", "amazon_electronics_computers.npz", 13752, 767, 10),
    "amazon_photo": StudyFile("Amazon", "Photo", "amazon_electronics_photo.npz", 7650, 745, 8),
    "coauthor_cs": StudyFile("Coauthor", "CS", "ms_academic_cs.npz", 18333, 6805, 15),
    "coauthor_physics": StudyFile("Coauthor", "Physics", "ms_academic_phy.npz", 34493, 8415, 5),
}
_ARRAYS = ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "attr_data", "attr_indices", "attr_indptr",
           "attr_shape", "labels")
#: The arrays of O(nodes) entries, read and checked before the others.
_SMALL = ("adj_shape", "attr_shape", "labels", "adj_indptr", "attr_indptr")
#: The largest raw file read (the study's are 3-4 MB; hashed a block at a time, it is bounded first: a 4 GiB
#: sparse file was read whole into memory to be hashed).
MAX_STUDY_FILE_BYTES = 1 << 30
#: The most the arrays of a raw file may inflate, against the bytes they take in it (the study's files:
#: 3.9x Coauthor Physics, 9.4x Amazon Computers; a 1.5 MB file of compressed zeros declaring 67 million
#: nodes inflated to 5.4 GB in 47 s).
MAX_INFLATION = 100
_HASH_BLOCK = 1 << 20


def load_study_graph(dataset: StudyGraphConfig, root: str | Path | None, cache: str | Path) -> Graph:
    """The standardised graph of ``dataset.name`` with the split its config draws.

    Raises:
        DatasetUnavailable: the file is neither under ``root`` nor in the cache and cannot be downloaded,
            or it cannot be read, is damaged, or holds another graph.
        ConfigError: a split that cannot be drawn
            ([`pipegnn.data.splits.draw_split`][pipegnn.data.splits.draw_split]).
    """
    name = str(dataset.name)
    spec = STUDY_FILES[name]
    graph = _standardised(name, spec, root, Path(cache))
    train, val, test = draw_split(graph.y, dataset.split, dataset.split_seed,
                                  train_per_class=dataset.train_per_class,
                                  val_per_class=dataset.val_per_class,
                                  train_fraction=dataset.train_fraction, val_fraction=dataset.val_fraction)
    return dataclasses.replace(graph, train_mask=train, val_mask=val, test_mask=test)


def _standardised(name: str, spec: StudyFile, root: str | Path | None, cache: Path) -> Graph:
    """The graph without a split (masks all False), from the cache or built from the raw file."""
    url = f"{STUDY_URL}/{spec.file}"
    sources = [Path(root) / spec.raw.parent] if root else []
    dest = cache / spec.raw.parent
    with contextlib.ExitStack() as stack:
        folder = first_complete([*sources, dest], [spec.file])
        if folder is None:
            log.info("%s: %s missing from %s, downloading from %s", name, spec.file, dest, url)
            try:
                with download_timeout():
                    folder = _download(url, spec.file, dest, stack, name)
            except OSError as e:  # URLError and socket errors are OSErrors
                raise unavailable(name, [str(spec.raw)], [*sources, dest], url, e,
                                  f"put it in <data.root>/{spec.raw.parent}/") from e
        path = folder / spec.file
        digest = _sha256(path, name)
        saved = cache / spec.family / spec.folder / "processed" / digest[:16] / GRAPH_FILE
        graph = load_saved_graph(saved, name)
        if graph is not None:
            return graph
        try:
            graph = _standardise(name, read_study_npz(path, name))
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise unreadable(name, folder, url, e) from e
    save_graph(graph, saved)
    return graph


def _sha256(path: Path, name: str) -> str:
    """The raw file's sha256, read a block at a time once its size is within `MAX_STUDY_FILE_BYTES`.

    Raises:
        DatasetUnavailable: a file past the bound, or no regular file.
    """
    if not path.is_file():
        raise _bad(name, path, "it is no regular file")
    size = path.stat().st_size
    if size > MAX_STUDY_FILE_BYTES:
        raise _bad(name, path, f"it holds {size:,} bytes, more than the {MAX_STUDY_FILE_BYTES:,} a raw file "
                               "of the study may (its files hold 3-4 MB)")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(url: str, file: str, dest: Path, stack: contextlib.ExitStack, name: str) -> Path:
    """Download ``url`` into ``dest`` (atomically) when it can be written, else into a temporary folder;
    returns the folder holding ``file``."""
    from torch_geometric.data import download_url

    staging, writable = staging_folder(dest, stack, name)
    download_url(url, str(staging), log=False)
    if not writable:
        return staging
    os.replace(staging / file, dest / file)
    return dest


def read_study_npz(path: str | Path, name: str) -> dict[str, np.ndarray]:
    """The numeric arrays of one of the study's ``.npz`` files, checked before any large one is read.

    In order: every array's npy header (its declared shape against the bytes the archive says it holds);
    then the small arrays (the two shapes, the labels, the row pointers: O(nodes)) against each other;
    then the entries the large arrays declare against the row pointers' counts and, with the dense
    features, against the memory available; only then are the large arrays read, and their column
    indices checked against the shapes.

    Raises:
        DatasetUnavailable: a missing array, a declared shape its stored bytes cannot hold, arrays that
            disagree (node counts, row pointers, entry counts, index ranges, labels beyond the nodes),
            more memory than is available, or the file of another of the study's graphs.
    """
    path = Path(path)
    shapes = _declared_shapes(path, name)
    with np.load(path, allow_pickle=False) as npz:
        small = {key: npz[key] for key in _SMALL}
        n, f = _check_small(name, path, small, shapes)
        declared = 4 * n * f  # the dense features the graph becomes
        for matrix in ("adj", "attr"):
            entries = int(small[f"{matrix}_indptr"][-1])
            for key in (f"{matrix}_indices", f"{matrix}_data"):
                if shapes[key][0] != (entries,):
                    raise _bad(name, path, f"{key} declares shape {shapes[key][0]}; the row pointers count "
                                           f"{entries} entries")
                declared += entries * shapes[key][1].itemsize
        available = allocatable_bytes()  # under a process's memory cap too (prlimit, train.memory_limit_gb)
        if declared > available:
            raise _bad(name, path, f"its arrays and dense float32 features ({n} x {f}) need "
                                   f"{declared / 2**30:.1f} GiB, more than the {available / 2**30:.1f} GiB "
                                   "this process may allocate")
        arrays = {**small, **{key: npz[key] for key in _ARRAYS if key not in small}}
    for matrix, cols in (("adj", n), ("attr", f)):
        indices = arrays[f"{matrix}_indices"]
        if indices.size and (indices.min() < 0 or indices.max() >= cols):
            raise _bad(name, path, f"{matrix}'s column indices leave [0, {cols})")
    return arrays


def _declared_shapes(path: Path, name: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each array's shape and dtype as its npy header declares them, checked against its stored size."""
    shapes = {}
    with zipfile.ZipFile(path) as archive:
        members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
        missing = [a for a in _ARRAYS if a not in members]
        if missing:
            raise _bad(name, path, f"it lacks the arrays {missing} of the study's layout")
        inflated = sum(members[key].file_size for key in _ARRAYS)
        stored = min(sum(members[key].compress_size for key in _ARRAYS), path.stat().st_size)
        if inflated > MAX_INFLATION * max(stored, 1):  # (the file's own size: a directory may lie)
            raise _bad(name, path, f"its arrays inflate to {inflated:,} bytes from {stored:,}, more than "
                                   f"{MAX_INFLATION} times (the study's files: under 10 times)")
        for key in _ARRAYS:
            with archive.open(members[key]) as f:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(f)
            declared = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if dtype.hasobject or declared > members[key].file_size:
                raise _bad(name, path, f"array {key} declares shape {shape} of {dtype}, more than its "
                                       f"{members[key].file_size} stored bytes")
            shapes[key] = (tuple(shape), dtype)
    return shapes


def _check_small(name: str, path: Path, a: dict[str, np.ndarray],
                 shapes: dict[str, tuple[tuple[int, ...], np.dtype]]) -> tuple[int, int]:
    """The node and feature counts, once the shapes, labels and row pointers agree."""
    adj_shape, attr_shape, labels = a["adj_shape"], a["attr_shape"], a["labels"]
    if adj_shape.shape != (2,) or attr_shape.shape != (2,) or labels.ndim != 1:
        raise _bad(name, path, "adj_shape and attr_shape must be pairs, labels a vector")
    n, f = int(attr_shape[0]), int(attr_shape[1])
    if (int(adj_shape[0]), int(adj_shape[1])) != (n, n) or labels.size != n or n < 1 or f < 1:
        raise _bad(name, path, f"adjacency {tuple(adj_shape)}, features {tuple(attr_shape)} and "
                               f"{labels.size} labels do not describe one graph")
    for matrix in ("adj", "attr"):
        indptr = a[f"{matrix}_indptr"]
        if indptr.shape != (n + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise _bad(name, path, f"{matrix}'s row pointers are not {n + 1} ascending offsets from 0")
    if any(len(shapes[k][0]) != 1 for k in ("adj_indices", "adj_data", "attr_indices", "attr_data")):
        raise _bad(name, path, "the matrices' indices and values must be vectors")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= n:
        raise _bad(name, path, f"labels must be integers in [0, {n}) (a class per node at most)")
    classes = int(labels.max()) + 1
    other = next((o for o, s in STUDY_FILES.items()
                  if o != name and (s.nodes, s.features, s.classes) == (n, f, classes)), None)
    if other is not None:
        raise _bad(name, path, f"it holds {n} nodes, {f} features and {classes} classes: the graph of "
                               f"dataset {other!r}, not {name!r}")
    spec = STUDY_FILES[name]
    if (spec.nodes, spec.features, spec.classes) != (n, f, classes):
        log.warning("dataset %s: %s holds %d nodes, %d features, %d classes; the published file holds "
                    "%d, %d, %d", name, path, n, f, classes, spec.nodes, spec.features, spec.classes)
    return n, f


def _bad(name: str, path: Path, why: str) -> DatasetUnavailable:
    return DatasetUnavailable(f"dataset {name!r}: {path} is not a usable file of the study: {why}. Replace "
                              f"it with {STUDY_URL}/{path.name}.")


def _standardise(name: str, a: dict[str, np.ndarray]) -> Graph:
    """The study's ``standardize``: unweighted, undirected, no self loops, largest connected component;
    binary bag-of-words features."""
    n = int(a["adj_shape"][0])
    adj = sp.csr_matrix((np.ones_like(a["adj_data"]), a["adj_indices"], a["adj_indptr"]), shape=(n, n))
    adj = ((adj + adj.T) > 0).astype(np.float32).tolil()
    adj.setdiag(0)
    adj = adj.tocsr()
    adj.eliminate_zeros()
    _, component = connected_components(adj)
    keep = np.flatnonzero(component == np.bincount(component).argmax())  # ascending, as the study keeps
    adj = adj[keep][:, keep].tocoo()
    attr = sp.csr_matrix((a["attr_data"], a["attr_indices"], a["attr_indptr"]),
                         shape=tuple(int(s) for s in a["attr_shape"]))[keep]
    x = torch.zeros(keep.size, attr.shape[1], dtype=torch.float32)
    rows = np.repeat(np.arange(keep.size), np.diff(attr.indptr))
    nonzero = attr.data != 0
    x[torch.from_numpy(rows[nonzero]), torch.from_numpy(attr.indices[nonzero].astype(np.int64))] = 1.0
    edge_index = torch.from_numpy(np.stack([adj.row, adj.col]).astype(np.int64))
    order = torch.argsort(edge_index[0] * keep.size + edge_index[1])  # coalesced: sorted by (source, target)
    y = torch.from_numpy(a["labels"][keep].astype(np.int64))
    empty = torch.zeros(keep.size, dtype=torch.bool)
    return Graph(name=name, x=x, y=y, edge_index=edge_index[:, order], train_mask=empty,
                 val_mask=empty.clone(), test_mask=empty.clone(), num_classes=int(a["labels"].max()) + 1)
