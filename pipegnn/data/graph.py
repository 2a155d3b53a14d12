"""The framework-neutral graph every other module reads, its tensor-only file in a dataset cache, and
the staging folder through which loaders download into that cache.

A graph's node features are either in memory (``x``) or described by ``features`` (a
[`FeatureMeta`][pipegnn.data.features.FeatureMeta]: on disk, ``data.features=disk``, or not read by this
process at all, e.g. a pipeline rank without the first layer). With ``data.edges=disk`` its edges are
described by ``edges`` (an [`EdgeMeta`][pipegnn.data.graph_store.EdgeMeta]: their number, key and graph
store folder), and ``edge_index`` may be empty (a synthetic graph whose edges were not drawn again);
every other field is always in memory.

A saved graph holds plain tensors, a name, an int, a format number and its content checksum
([`pipegnn.integrity`][pipegnn.integrity]), and is read back with ``torch.load(..., weights_only=True)``:
nothing read from a cache folder can execute code. A file that is unreadable, damaged in place or not the
graph asked for is ignored with a warning (the loader rebuilds it). A cache
folder that cannot be written is no error: the graph is built in memory, with one warning.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from pipegnn.atomic import atomic_path
from pipegnn.integrity import seal, unsealed

if TYPE_CHECKING:
    from pipegnn.data.features import FeatureMeta
    from pipegnn.data.graph_store import EdgeMeta

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

_FORMAT = 2  # bump when the saved layout changes (2: content checksum)
#: File name of a saved graph under ``<cache>/<dataset folder>/processed/`` (PyG's and ogb's own
#: processed files there are never read).
GRAPH_FILE = f"pipegnn-graph-v{_FORMAT}.pt"
_MASKS = ("train_mask", "val_mask", "test_mask")


@dataclass
class Graph:
    """A node-classification graph.

    Attributes:
        name: dataset name, for records and messages.
        x: node features ``[N, F]`` (float32), or None when they are not in memory (``features``).
        y: node labels ``[N]`` (int64).
        edge_index: directed edges ``[2, E]`` as (source, target), coalesced.
        train_mask, val_mask, test_mask: boolean split masks ``[N]``.
        num_classes: number of label classes.
        features: the features' shape and dtype, and their folder when they are on disk; None when
            ``x`` holds them.
        edges: with ``data.edges=disk``, the edges' number, key and graph store folder (``edge_index`` is
            then ``[2, 0]`` when they were not loaded); None otherwise.
    """

    name: str
    x: Tensor | None
    y: Tensor
    edge_index: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    num_classes: int
    features: FeatureMeta | None = None
    edges: EdgeMeta | None = None

    def __post_init__(self) -> None:
        if (self.x is None) == (self.features is None):
            raise ValueError("a Graph has its features either in memory (x) or described (features)")

    @property
    def num_nodes(self) -> int:
        return int(self.y.size(0))

    @property
    def num_edges(self) -> int:
        return self.edges.num_edges if self.edges is not None else int(self.edge_index.size(1))

    @property
    def num_features(self) -> int:
        return int(self.x.size(1)) if self.x is not None else self._described().cols

    @property
    def feature_dtype(self) -> torch.dtype:
        return self.x.dtype if self.x is not None else self._described().dtype

    @property
    def feature_source(self) -> "Tensor | FeatureMeta":
        """``x``, or the description of the features that are not in memory (sizes a model either way)."""
        return self.x if self.x is not None else self._described()

    def _described(self) -> FeatureMeta:
        """``features``, for a graph whose ``x`` is None (``__post_init__``: then ``features`` is set)."""
        assert self.features is not None
        return self.features

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


def save_graph(graph: Graph, path: str | Path) -> bool:
    """Write ``graph`` to ``path`` as plain tensors (atomically: a parallel reader never sees half a
    file). Returns False, with one warning, when the folder cannot be written."""
    path = Path(path)
    state = seal({"format": _FORMAT, "name": graph.name, "num_classes": int(graph.num_classes),
                  "x": graph.x, "y": graph.y, "edge_index": graph.edge_index,
                  **{m: getattr(graph, m) for m in _MASKS}})
    try:
        with atomic_path(path) as tmp:
            torch.save(state, tmp)
        return True
    except OSError as e:
        log.warning("dataset %s: cache folder %s cannot be written (%s); the graph is kept in memory "
                    "only", graph.name, path.parent, e)
        return False


def load_saved_graph(path: str | Path, name: str) -> Graph | None:
    """The graph [`save_graph`][pipegnn.data.graph.save_graph] wrote to ``path``, read with
    ``weights_only=True``; None when there is no such file, or (with a warning) when it cannot be read or is
    not a graph named ``name``."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        why = _not_a_graph(state, name) or unsealed(state)
    except Exception as e:  # truncated, foreign or code-carrying files: rebuild the graph
        why = f"{type(e).__name__}: {e}".splitlines()[0]
    if why is not None:
        log.warning("dataset %s: ignoring cached graph %s (%s); rebuilding it", name, path, why)
        return None
    return Graph(name=name, x=state["x"], y=state["y"], edge_index=state["edge_index"],
                 train_mask=state["train_mask"], val_mask=state["val_mask"],
                 test_mask=state["test_mask"], num_classes=state["num_classes"])


def _not_a_graph(state: Any, name: str) -> str | None:
    """Why a loaded state is not a saved graph named ``name`` (None if it is)."""
    if not isinstance(state, dict):
        return f"not a saved graph ({type(state).__name__})"
    if state.get("format") != _FORMAT or state.get("name") != name:
        return f"format {state.get('format')!r} of dataset {state.get('name')!r}"
    x, y, edges, k = state.get("x"), state.get("y"), state.get("edge_index"), state.get("num_classes")
    masks = [state.get(m) for m in _MASKS]
    if not (isinstance(x, Tensor) and isinstance(y, Tensor) and isinstance(edges, Tensor)
            and all(isinstance(t, Tensor) for t in masks)) or type(k) is not int or k < 1:
        return "missing or mistyped fields"
    n = x.size(0) if x.dim() == 2 else -1
    if x.dtype != torch.float32 or y.dtype != torch.int64 or tuple(y.shape) != (n,):
        return "features or labels of the wrong type or shape"
    if any(state[m].dtype != torch.bool or tuple(state[m].shape) != (n,) for m in _MASKS):
        return "split masks of the wrong type or shape"
    if edges.dtype != torch.int64 or edges.dim() != 2 or edges.size(0) != 2:
        return "edge_index of the wrong type or shape"
    if edges.numel() and (int(edges.min()) < 0 or int(edges.max()) >= n):
        return "edge_index out of range"
    return None


def staging_folder(dest: Path, stack: contextlib.ExitStack, what: str) -> tuple[Path, bool]:
    """A fresh folder to download into: inside ``dest`` (created) when it can be written, so that
    finished files move into ``dest`` atomically; otherwise, with one warning, a temporary folder
    elsewhere whose files serve this run only. Removed when ``stack`` closes.

    Returns:
        The folder and whether ``dest`` is writable (whether the files should be moved into it).
    """
    try:
        dest.mkdir(parents=True, exist_ok=True)
        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".download-", dir=dest))), True
    except OSError as e:
        log.warning("dataset %s: cache folder %s cannot be written (%s); downloading to a temporary "
                    "folder, the dataset is built in memory and not cached", what, dest, e)
        return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pipegnn-download-"))), False
