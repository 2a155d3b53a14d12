"""The raw Planetoid files checked against the published ones and against each other, before anything is
densified or built from them: each matrix's declared shape (`PUBLISHED_SHAPES`), the split the files
describe (row counts, distinct test ids in range, the node count) and the adjacency dict's ids. Each
check raises a ValueError naming the file and what disagrees;
[`pipegnn.data.planetoid`][pipegnn.data.planetoid] turns it into one DatasetUnavailable."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: The shapes of the published raw files (rows, columns; ``test.index``: its number of ids) and each
#: graph's number of nodes: a raw file of another shape is refused before it is densified.
PUBLISHED_SHAPES: dict[str, dict[str, Any]] = {
    name: {"x": (train, width), "tx": (1000, width), "allx": (rest, width), "y": (train, classes),
           "ty": (1000, classes), "ally": (rest, classes), "test.index": 1000, "nodes": nodes}
    for name, train, rest, width, classes, nodes in (("cora", 140, 1708, 1433, 7, 2708),
                                                      ("citeseer", 120, 2312, 3703, 6, 3327),
                                                      ("pubmed", 60, 18717, 500, 3, 19717))}
#: Largest dense matrix a raw file of a graph not in `PUBLISHED_SHAPES` may declare (bytes).
_MAX_DENSE_BYTES = 2**31


def check_shape(path: Path, part: str, published: dict[str, Any], shape: Any) -> None:
    """``shape`` (a raw matrix's declared shape) is the published file's (a graph not in
    `PUBLISHED_SHAPES`: two dimensions of at most `_MAX_DENSE_BYTES` as float32).

    Raises:
        ValueError: naming the file, its shape and the published one.
    """
    if not (isinstance(shape, tuple) and len(shape) == 2
            and all(isinstance(d, (int, np.integer)) and 0 <= d for d in shape)):
        raise ValueError(f"{path}: not a matrix's shape: {shape!r}")
    shape = (int(shape[0]), int(shape[1]))
    if part in published:
        if shape != published[part]:
            raise ValueError(f"{path}: a {shape[0]} x {shape[1]} matrix, the published ind.*.{part} is "
                             f"{published[part][0]} x {published[part][1]} (a file of another part, or "
                             "cut short?)")
    elif shape[0] * shape[1] * 4 > _MAX_DENSE_BYTES:
        raise ValueError(f"{path}: declares a {shape[0]} x {shape[1]} matrix, more than "
                         f"{_MAX_DENSE_BYTES / 2**30:g} GiB dense")


def check_split(folder: str | Path, name: str, train: int, rest: int, test: int, index: Tensor,
                 nodes: int) -> None:
    """The raw files agree with each other: ``train`` labelled rows (``x``, ``y``) and 500 validation
    rows among the ``rest`` (``allx``, ``ally``), and ``index`` (``test.index``) as many distinct ids as
    the ``test`` rows (``tx``, ``ty``), each from ``rest`` on and below the graph's ``nodes`` (CiteSeer,
    whose isolated test nodes leave gaps) or ``rest + test`` (the others).

    Raises:
        ValueError: naming the files and the counts that disagree.
    """
    where = f"{folder}: ind.{name}"
    published = PUBLISHED_SHAPES.get(name, {}).get("nodes")
    if published is not None and nodes != published:
        raise ValueError(f"{where}.graph has {nodes} nodes, the published graph {published}")
    if train + 500 > rest:
        raise ValueError(f"{where}.y's {train} training rows and 500 validation rows exceed ally's {rest}")
    if index.numel() != test:
        raise ValueError(f"{where}.test.index holds {index.numel()} ids for {test} test rows (ty)")
    end = nodes if name == "citeseer" else rest + test
    if index.numel() and not (rest <= int(index.min()) and int(index.max()) < end):
        raise ValueError(f"{where}.test.index holds ids from {int(index.min())} to {int(index.max())}, "
                         f"outside the test nodes' {rest}..{end - 1}")
    if int(torch.unique(index).numel()) != index.numel():
        raise ValueError(f"{where}.test.index repeats ids")


def check_array_state(state: Any) -> None:
    """An array's pickled state (numpy's ``(version, shape, dtype, is_fortran, data)``) carries the bytes its
    shape declares, before numpy allocates the array (a 14-byte file may declare petabytes).

    Raises:
        ValueError: not numpy's state of a numeric array, or the shape and the bytes disagree.
    """
    try:
        _, shape, dtype, _, data = state
        count = 1
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
                raise ValueError(f"dimension {d!r}")
            count *= int(d)
        dtype = np.dtype(dtype)
    except (TypeError, ValueError) as e:
        raise ValueError(f"an array whose pickled state is not numpy's ({e})") from None
    if dtype.kind not in "biuf" or not isinstance(data, (bytes, bytearray, str)):
        raise ValueError(f"an array of {dtype} carrying {type(data).__name__}, not numbers")
    if count * dtype.itemsize != len(data):
        raise ValueError(f"an array declares {tuple(int(d) for d in shape)} of {dtype} "
                         f"({count * dtype.itemsize:,} bytes) but carries {len(data):,} bytes")


def check_labels(path: Path, labels: Tensor) -> None:
    """Every row of a raw label matrix (``y``, ``ty``, ``ally``) is one-hot: a row of zeros, of several
    ones or of other values would train as class 0 (the argmax of nothing).

    Raises:
        ValueError: naming the file, the first such row and what it holds.
    """
    bad = ((labels != 0) & (labels != 1)).any(dim=1) | (labels.sum(dim=1) != 1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"{path}: row {row} is no one-hot label ({labels[row].tolist()[:10]}); "
                         f"{int(bad.sum())} rows are not")


def check_features(path: Path, features: Tensor) -> None:
    """A raw feature matrix (``x``, ``tx``, ``allx``) holds finite numbers only.

    Raises:
        ValueError: naming the file and the first row holding NaN or an infinity.
    """
    bad = ~torch.isfinite(features).all(dim=1)
    if bool(bad.any()):
        raise ValueError(f"{path}: row {int(bad.nonzero()[0, 0])} holds NaN or an infinity; "
                         f"{int(bad.sum())} rows do")


def check_neighbour_count(path: Path, graph: dict[Any, Any]) -> None:
    """The neighbour lists of the adjacency dict ``graph`` (read from ``path``) hold at most as many ids as
    the file has bytes (a pickle writes each one; lists shared between nodes would expand a few hundred
    KB into gigabytes of edges). Counted by the lists' lengths alone, before anything walks them.

    Raises:
        ValueError: naming the file and the counts.
    """
    size = path.stat().st_size
    entries = 0
    for neighbours in graph.values():
        entries += len(neighbours) if isinstance(neighbours, list) else 0
        if entries > size:
            raise ValueError(f"{path}: more than {size:,} neighbour ids in a file of {size:,} bytes: its "
                             "nodes share neighbour lists, which no published graph does")


def check_adjacency(path: Path, graph: dict[int, list[int]], nodes: int) -> None:
    """Every node of the adjacency dict ``graph`` (read from ``path``) and each of its neighbours is an id
    from 0 to ``nodes`` - 1: one that is not (a negative id, which building the edges would drop without a
    word, or one past the labelled nodes) is a ValueError naming the file, the node and the id."""
    for node, neighbours in graph.items():
        if not 0 <= node < nodes:
            raise ValueError(f"{path}: node id {node} is outside the {nodes} labelled nodes "
                             f"(0 to {nodes - 1})")
        bad = next((i for i in neighbours if not 0 <= i < nodes), None)
        if bad is not None:
            raise ValueError(f"{path}: node {node} has the neighbour id {bad}, outside the {nodes} labelled "
                             f"nodes (0 to {nodes - 1})")
