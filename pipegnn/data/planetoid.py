"""Planetoid citation graphs (Cora, CiteSeer, PubMed) and PubMed's real topology with random features
(``pubmed_topology``), read from the raw Planetoid files.

The graphs equal what PyG's ``Planetoid`` loader returns (its ``read_planetoid_data``, public split,
``NormalizeFeatures``), but no PyG dataset class is used: those read their ``processed/*.pt`` files
with ``torch.load(weights_only=False)``, so a crafted file in a writable cache would run code. Nothing
processed is cached either: the raw files are read on every load (a fraction of a second).

The raw files (``ind.<name>.x``, ``.tx``, ``.allx``, ``.y``, ``.ty``, ``.ally``, ``.graph``; all but
``.test.index``) are Python pickles by their format, and unpickling an untrusted pickle can run code.
Keep them in a trusted ``data.root``: pipegnn reads them from there in place, never copying them. Raw
files downloaded into the cache are read from there, so all of them are read with a restricted
unpickler that admits only what the published files hold (numpy arrays and dtypes, scipy CSR matrices,
a dict of int lists) and checks the result (a crafted file is refused with
[`DatasetUnavailable`][pipegnn.errors.DatasetUnavailable]); that is a safeguard, not a licence to read raw
files from untrusted folders.

Before anything is densified or allocated (`pipegnn/data/planetoid_checks.py`), every file's declared
shape is checked against the published files' (a file of another part, or cut short, is refused naming
both shapes), and the files against each other: features and labels of one node set have one row count,
``test.index`` holds as many distinct ids as ``tx`` has rows, all in the test range (no id a crafted file
could turn into a huge allocation).
"""
from __future__ import annotations

import contextlib
import logging
import os
import pickle
import stat
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch_geometric.transforms as T
from torch import Tensor
from torch_geometric.data import Data, download_url
from torch_geometric.datasets import Planetoid
from torch_geometric.io import read_txt_array
from torch_geometric.io.planetoid import edge_index_from_dict
from torch_geometric.utils import index_to_mask

from pipegnn.data.graph import Graph, staging_folder
from pipegnn.data.planetoid_checks import (
    PUBLISHED_SHAPES,
    check_adjacency,
    check_features,
    check_labels,
    check_neighbour_count,
    check_shape,
    check_split,
)
from pipegnn.data.planetoid_pickle import RawUnpickler
from pipegnn.errors import DatasetUnavailable
from pipegnn.jsonfile import file_kind

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

#: pipegnn dataset name -> PyG's Planetoid name (also the folder name under a data root).
PLANETOID_NAMES = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
#: The raw PubMed files pubmed_topology reads: graph, labels and split, not the features.
PUBMED_TOPOLOGY_FILES = tuple(f"ind.pubmed.{part}" for part in ("y", "ty", "ally", "graph", "test.index"))
PUBMED_FEATURES = 500  # width of PubMed's TF-IDF features
#: What reading a malformed (truncated, foreign or crafted) raw file raises; MemoryError too: a published
#: graph's files are a few MB, and a 12-byte pickle declaring a 1 TiB string, or an array reconstructed at
#: 1 TiB before its state can be checked, asks for more than any machine has.
_MALFORMED = (ValueError, TypeError, AttributeError, LookupError, ArithmeticError, RuntimeError, EOFError,
              pickle.UnpicklingError, MemoryError)


#: The largest ``test.index`` read (bytes): a published graph's holds 1,000 ids (about 5 KB); another's
#: at most as many ids as ``_MAX_INDEX_BYTES_UNPUBLISHED`` bytes of text.
_MAX_INDEX_BYTES = 64 << 10
_MAX_INDEX_BYTES_UNPUBLISHED = 16 << 20
#: The raw parts that hold one-hot labels (the others but ``graph`` and ``test.index``: features).
_LABEL_PARTS = ("y", "ty", "ally")


def raw_file_names(name: str) -> list[str]:
    """The eight raw Planetoid files of dataset ``name`` (e.g. ``ind.cora.x``)."""
    return [f"ind.{name}.{part}" for part in _PARTS]


def read_raw(folder: str | Path, name: str, part: str) -> Tensor | dict[int, list[int]]:
    """One raw Planetoid file, as PyG's ``read_file`` returns it, through the restricted unpickler.

    ``test.index`` is text (a long tensor); ``graph`` is the adjacency dict {node: [neighbours]}; the
    other parts are feature or one-hot label matrices (dense float tensors).

    Raises:
        ValueError: the file holds something else than the published files do (``pickle.
            UnpicklingError`` for a global outside the allowlist).
    """
    path = Path(folder) / f"ind.{name.lower()}.{part}"
    published = PUBLISHED_SHAPES.get(name.lower(), {})
    if part == "test.index":
        size = path.stat().st_size
        most = _MAX_INDEX_BYTES if "test.index" in published else _MAX_INDEX_BYTES_UNPUBLISHED
        if size > most:  # read whole and split by PyG's reader: 50 MB of ids took 2.3 GB
            raise ValueError(f"{path}: {size:,} bytes, more than a test.index of this graph holds "
                             f"({most:,} at most)")
        index = read_txt_array(str(path), dtype=torch.long).reshape(-1)
        if "test.index" in published and index.numel() != published["test.index"]:
            raise ValueError(f"{path}: {index.numel()} test ids, the published file has "
                             f"{published['test.index']}")
        return index
    with open(path, "rb") as f:
        out = RawUnpickler(f, encoding="latin1").load()
    if part == "graph":
        if isinstance(out, dict):  # counted before anything walks them: lists shared between nodes
            check_neighbour_count(path, out)  # expand a few hundred KB into gigabytes
        if not isinstance(out, dict) or not all(
                type(k) is int and type(v) is list and all(type(i) is int for i in v)
                for k, v in out.items()):
            raise ValueError(f"{path}: not an adjacency dict of int lists ({type(out).__name__})")
        return out
    if isinstance(out, sp.csr_matrix):
        check_shape(path, part, published, getattr(out, "_shape", None))  # as declared, before anything
        # Rebuilt from its arrays and fully checked before scipy's compiled code indexes with them.
        out = sp.csr_matrix((_numeric(out.data, path), _numeric(out.indices, path),
                             _numeric(out.indptr, path)), shape=out.shape)
        out.check_format(full_check=True)
        out = out.todense()
    out = _numeric(out, path)
    if out.ndim != 2:
        raise ValueError(f"{path}: expected a matrix, got {out.ndim} dimensions")
    check_shape(path, part, published, out.shape)
    matrix = torch.from_numpy(np.asarray(out)).to(torch.float)
    (check_labels if part in _LABEL_PARTS else check_features)(path, matrix)
    return matrix


def _read_tensor(folder: str | Path, name: str, part: str) -> Tensor:
    """[`read_raw`][pipegnn.data.planetoid.read_raw] of a part that is a tensor (any part but ``graph``)."""
    out = read_raw(folder, name, part)
    assert isinstance(out, Tensor), part
    return out


def _read_graph(folder: str | Path, name: str) -> dict[int, list[int]]:
    """[`read_raw`][pipegnn.data.planetoid.read_raw] of the ``graph`` part: the adjacency dict."""
    out = read_raw(folder, name, "graph")
    assert isinstance(out, dict)
    return out


def _numeric(a: Any, path: Path) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
        raise ValueError(f"{path}: expected a numeric array, got {type(a).__name__}"
                         f"{'' if not isinstance(a, np.ndarray) else ' of ' + str(a.dtype)}")
    return a


def read_planetoid(folder: str | Path, name: str) -> Data:
    """The raw Planetoid files of ``name`` in ``folder`` as one graph, as PyG's ``read_planetoid_data``
    builds it (node order, CiteSeer's zero rows for isolated test nodes, public split), with the raw
    features (not yet row-normalised).

    Raises:
        One of `_MALFORMED` (ValueError, pickle.UnpicklingError, ...): a malformed file.
    """
    parts = {part: _read_tensor(folder, name, part) for part in ("x", "tx", "allx", "y", "ty", "ally")}
    x, tx, allx, y, ty, ally = parts.values()
    graph = _read_graph(folder, name)
    test_index = _read_tensor(folder, name, "test.index")
    name = name.lower()
    for a, b in (("x", "y"), ("tx", "ty"), ("allx", "ally")):
        if parts[a].size(0) != parts[b].size(0):
            raise ValueError(f"{folder}: ind.{name}.{a} has {parts[a].size(0)} rows, .{b} {parts[b].size(0)}")
    if not x.size(1) == tx.size(1) == allx.size(1) or not y.size(1) == ty.size(1) == ally.size(1):
        raise ValueError(f"{folder}: ind.{name}'s feature widths {x.size(1)}, {tx.size(1)}, {allx.size(1)} "
                         f"or class counts {y.size(1)}, {ty.size(1)}, {ally.size(1)} (x, tx, allx; y, ty, "
                         "ally) differ")
    check_split(folder, name, y.size(0), ally.size(0), ty.size(0), test_index, len(graph))
    sorted_test_index = test_index.sort()[0]
    if name.lower() == "citeseer":
        # Isolated CiteSeer nodes leave gaps in the test ids: zero rows for them in tx and ty.
        span = int(test_index.max() - test_index.min()) + 1
        tx_ext = torch.zeros(span, tx.size(1), dtype=tx.dtype)
        tx_ext[sorted_test_index - test_index.min(), :] = tx
        ty_ext = torch.zeros(span, ty.size(1), dtype=ty.dtype)
        ty_ext[sorted_test_index - test_index.min(), :] = ty
        tx, ty = tx_ext, ty_ext
    x = torch.cat([allx, tx], dim=0)
    x[test_index] = x[sorted_test_index]
    labels = torch.cat([ally, ty], dim=0).max(dim=1)[1]
    labels[test_index] = labels[sorted_test_index]
    n = labels.size(0)
    check_adjacency(Path(folder) / f"ind.{name}.graph", graph, n)
    edge_index = edge_index_from_dict(graph, num_nodes=n)
    if edge_index.numel() and not 0 <= int(edge_index.min()) <= int(edge_index.max()) < n:
        raise ValueError(f"{folder}: ind.{name}.graph names nodes outside the {n} labelled ones")
    data = Data(x=x, edge_index=edge_index, y=labels)
    data.train_mask = index_to_mask(torch.arange(y.size(0)), size=n)
    data.val_mask = index_to_mask(torch.arange(y.size(0), y.size(0) + 500), size=n)
    data.test_mask = index_to_mask(test_index, size=n)
    return data


def load_planetoid(name: str, root: str | Path | None, cache: str | Path) -> Graph:
    """Load a Planetoid dataset with its public split and row-normalised features.

    Raw files are read in place from ``root/<Name>/raw`` (a trusted, read-only source, e.g.
    ``../shared/datasets``) when all eight are there, else from ``cache/<Name>/raw``, where missing
    files are downloaded. A cache that cannot be written is no error: the files are downloaded to a
    temporary folder for this run (one warning).

    Args:
        name: ``cora``, ``citeseer`` or ``pubmed``.
        root: folder holding ``<Name>/raw/ind.<name>.*`` (never written to), or None.
        cache: folder for downloaded raw files.

    Raises:
        DatasetUnavailable: the files are neither in ``root`` nor in the cache and cannot be downloaded,
            or a file is not a valid raw Planetoid file.
    """
    pyg_name = PLANETOID_NAMES[name]
    files = raw_file_names(name)
    raw_dir = Path(cache) / pyg_name / "raw"
    source = Path(root) / pyg_name / "raw" if root else None
    with contextlib.ExitStack() as stack:
        folder = next((f for f in (source, raw_dir) if f is not None
                       and all((f / file).is_file() for file in files)), None)
        if folder is None:
            _no_other_kind(name, [f / file for f in (source, raw_dir) if f is not None for file in files])
            missing = [f for f in files if not (raw_dir / f).is_file()]
            folder = _download(name, pyg_name, missing, source, raw_dir, stack)
        try:
            data = read_planetoid(folder, name)
        except _MALFORMED as e:
            raise DatasetUnavailable(
                f"dataset {name!r}: the raw files in {folder} are not valid Planetoid files "
                f"({type(e).__name__}: {e}). Replace them with the files from {Planetoid.url}.") from e
    # Row-normalised features, as in the GCN and GAT papers' setups.
    x = T.NormalizeFeatures()(Data(x=data.x)).x
    return Graph(name=name, x=x.float(), y=data.y, edge_index=data.edge_index,
                 train_mask=data.train_mask, val_mask=data.val_mask, test_mask=data.test_mask,
                 num_classes=int(data.y.max()) + 1)


def _no_other_kind(name: str, paths: list[Path]) -> None:
    """None of ``paths`` is there as something other than a regular file (a FIFO or a folder at
    ``ind.cora.x`` read as all eight files missing).

    Raises:
        DatasetUnavailable: naming the path and what it is.
    """
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError:  # not there (or a link to nothing): missing, as it should be reported
            continue
        if not stat.S_ISREG(mode):
            raise DatasetUnavailable(f"dataset {name!r}: {path} is {file_kind(mode)}, not a raw Planetoid "
                                     "file; remove it (or put the published file there)")


def _download(name: str, pyg_name: str, missing: list[str], source: Path | None, raw_dir: Path,
              stack: contextlib.ExitStack) -> Path:
    """Download the ``missing`` raw files into ``raw_dir`` (through a staging folder, so that an
    interrupted download leaves no partial file there); the folder holding all eight files."""
    log.info("%s: raw files missing from %s, downloading from %s", pyg_name, raw_dir, Planetoid.url)
    staging, persistent = staging_folder(raw_dir, stack, name)
    try:
        for f in missing:
            download_url(f"{Planetoid.url}/{f}", str(staging), log=False)
    except OSError as e:  # URLError and socket errors are OSErrors
        looked = " and ".join(str(p) for p in (source, raw_dir) if p is not None)
        raise DatasetUnavailable(
            f"dataset {name!r}: raw files {missing} are missing (looked in {looked}) "
            f"and the download from {Planetoid.url} failed ({e}). Download them and put them in "
            f"<data.root>/{pyg_name}/raw/ (or set $PIPEGNN_DATA to that data root).") from e
    if not persistent:
        for f in set(raw_file_names(name)) - set(missing):  # the ones the cache already held
            (staging / f).write_bytes((raw_dir / f).read_bytes())
        return staging
    for f in missing:
        os.replace(staging / f, raw_dir / f)
    return raw_dir


def load_pubmed_topology(root: str | Path | None, cache: str | Path, seed: int = 0) -> Graph:
    """PubMed's real graph, labels and public split with seeded random features of PubMed's width.

    For timing, partition and halo statistics only, never for accuracy: the features are random
    (row-normalised uniform noise) because the shared raw files lack ``ind.pubmed.allx``. Nodes are
    ordered as PyG's ``read_planetoid_data`` orders them (the ``allx`` nodes, then the test nodes in
    ``test.index`` order); edges are PyG's (``edge_index_from_dict``: coalesced, self-loops removed,
    88,648 directed edges). The raw files are read with [`read_raw`][pipegnn.data.planetoid.read_raw] (see the
    module docstring).

    Args:
        root: folder holding ``PubMed-partial/raw`` or ``PubMed/raw`` (read, never written to), or None.
        cache: the data cache; ``<cache>/PubMed/raw`` is used when ``dataset=pubmed`` downloaded it.
        seed: seed of the random features.

    Raises:
        DatasetUnavailable: the graph, label or split files are in none of those folders, or one is
            not a valid raw Planetoid file.
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
    try:
        y, ty, ally = (_read_tensor(folder, "pubmed", part) for part in ("y", "ty", "ally"))
        graph = _read_graph(folder, "pubmed")
        test_index = _read_tensor(folder, "pubmed", "test.index")
        check_split(folder, "pubmed", y.size(0), ally.size(0), ty.size(0), test_index, len(graph))
        # As read_planetoid_data: labels of allx nodes then test nodes, test rows moved to their ids.
        labels = torch.cat([ally, ty]).max(dim=1)[1]
        labels[test_index] = labels[test_index.sort()[0]]
        n = labels.numel()
        check_adjacency(folder / "ind.pubmed.graph", graph, n)
        edge_index = edge_index_from_dict(graph, num_nodes=n)
        if edge_index.numel() and not 0 <= int(edge_index.min()) <= int(edge_index.max()) < n:
            raise ValueError(f"ind.pubmed.graph names nodes outside the {n} labelled ones")
    except _MALFORMED as e:
        raise DatasetUnavailable(
            f"dataset 'pubmed_topology': the raw files in {folder} are not valid Planetoid files "
            f"({type(e).__name__}: {e}). Replace them with the files from {Planetoid.url}.") from e
    train = index_to_mask(torch.arange(y.size(0)), size=n)
    val = index_to_mask(torch.arange(y.size(0), y.size(0) + 500), size=n)
    test = index_to_mask(test_index, size=n)
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, PUBMED_FEATURES, generator=g)
    x /= x.sum(1, keepdim=True)
    return Graph(name="pubmed_topology", x=x, y=labels, edge_index=edge_index, train_mask=train,
                 val_mask=val, test_mask=test, num_classes=int(ally.size(1)))
