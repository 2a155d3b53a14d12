"""Edges on disk (``data.edges=disk``): a PyG ``GraphStore`` over checksummed CSC files, whose columns are
read by position without memory-mapping.

**Files.** An edge type ``(src, rel, dst)`` (here ``("node", <computation>, "node")``: the edges a model's
layers read, self-loops and GCN weights included) is stored in layout ``csc`` (in-edges grouped by
target, PyG's ``(row, colptr)``) as ``<src>.<rel>.<dst>.colptr.bin`` (``[N + 1]`` int64),
``.row.bin`` (``[E]`` int64 sources) and, when the edges are weighted, ``.weight.bin`` (float32 or
float64), raw bytes in this machine's byte order, with a JSON sidecar ``.json``: format, layout, nodes,
edges, weight dtype, byte order, the key they were built for and the files' content checksums. Files are
written atomically, the sidecar last ([`atomic_path`][pipegnn.atomic.atomic_path]; a killed
writer's temporaries are cleaned as the feature files' are).

**Reads.** ``train.memory_limit_gb`` caps the address space (``RLIMIT_AS``), which counts every mapping,
so nothing is memory-mapped: the row pointers (8 bytes a node) are read into memory once; sources and
weights stay on disk as [`EdgeColumn`][pipegnn.data.graph_store.EdgeColumn]s, which read the positions
asked for with coalesced ``os.preadv`` calls (positions less than `GAP` items apart share one read, as
a target's in-edges do), as the feature store reads rows.

**Integrity.** Before its first read an edge type's files are checked against their sidecar (sizes,
dtype, byte order, regular files) and their content checksums (one whole read), and its row pointers
must rise from 0 to E: damaged, truncated or foreign files raise
[`GraphFileError`][pipegnn.data.graph_store.GraphFileError] and are never read for training. Nothing read
can execute code (JSON and raw bytes).
"""
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, GraphStore

from pipegnn.atomic import atomic_path, clean_stale_temporaries
from pipegnn.data.features.files import DTYPES, OpenFiles, pread_full, regular_or_absent, runs
from pipegnn.integrity import file_checksum, stream_checksum
from pipegnn.jsonfile import read_json

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

#: Version of the file layout.
FORMAT = 1
#: Positions at most this many items apart are read with one call (the gap is read and dropped).
GAP = 512
_BLOCK = 1 << 22  # items written per block
_PARTS = ("colptr", "row", "weight")


class GraphFileError(ValueError):
    """An edge file does not match its sidecar (missing, truncated, damaged, built for another key)."""


@dataclass(frozen=True)
class EdgeMeta:
    """A graph's edges as ``data.edges=disk`` keeps them: their number (directed edges of the loaded
    graph), a key of their content (a hash of the edges, or of a synthetic graph's spec) and the folder of
    the graph stores built from them."""

    num_edges: int
    key: str
    folder: Path


def _stem(edge_type: Any) -> str:
    parts = (edge_type,) if isinstance(edge_type, str) else tuple(edge_type)
    for name in parts:
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise ValueError(f"edge type names must be plain file-name parts, got {edge_type!r}")
    return ".".join(parts)


def csc(edge_index: Tensor, num_nodes: int, edge_weight: Tensor | None = None
        ) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(colptr, row, weight)`` of ``edge_index`` grouped by target, edges of one target in their order
    in ``edge_index`` (a stable sort: the order of [`InCSR`][pipegnn.microbatch.halo.InCSR])."""
    perm = torch.argsort(edge_index[1], stable=True)
    colptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(edge_index[1], minlength=num_nodes), 0, out=colptr[1:])
    return colptr, edge_index[0, perm], None if edge_weight is None else edge_weight[perm]


class EdgeColumn:
    """One column of a stored edge type (``row`` or ``weight``), read by CSR position: ``column[pos]``
    (any order, repeats allowed) is a new CPU tensor; ``numel()`` the number of edges.

    Args:
        store: the store (its open file and read counters).
        path: the column's file.
        dtype: its element type.
        size: its number of items.
    """

    def __init__(self, store: DiskGraphStore, path: Path, dtype: torch.dtype, size: int):
        self.store, self.path, self.dtype, self.size = store, path, dtype, size

    def numel(self) -> int:
        return self.size

    def __getitem__(self, pos: Tensor) -> Tensor:
        ids = pos.detach().cpu().numpy().astype(np.int64, copy=False).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.size):
            raise IndexError(f"edge positions out of range [0, {self.size}): {ids.min()}..{ids.max()}")
        if ids.size == 0:
            return torch.empty(0, dtype=self.dtype)
        unique, inverse = np.unique(ids, return_inverse=True)
        first, length = (np.asarray(a, dtype=np.int64) for a in runs(unique, GAP))
        item = self.dtype.itemsize
        buffer = torch.empty(int(length.sum()) * item, dtype=torch.uint8)
        view, at = buffer.numpy().data, 0
        fd = self.store.descriptor(self.path)
        for start, count in zip(first.tolist(), length.tolist()):
            self.store.read_calls += pread_full(fd, view[at:at + count * item], start * item, self.path,
                                                GraphFileError)
            at += count * item
        self.store.bytes_read += at
        offset = np.cumsum(length) - length  # where each run starts in the buffer
        run = np.searchsorted(first, unique, side="right") - 1
        values = buffer.view(self.dtype)[torch.from_numpy(offset[run] + unique - first[run])]
        return values[torch.from_numpy(inverse.reshape(-1))]

    def __repr__(self) -> str:
        return f"EdgeColumn({str(self.path)!r}, {self.size} x {self.dtype})"


class DiskGraphStore(OpenFiles, GraphStore):
    """A PyG ``GraphStore`` of CSC edge files in ``folder`` (see the module doc).

    ``put_edge_index((row, colptr), edge_type=..., layout="csc")`` (or ``coo``, grouped by target on
    writing) writes an edge type; ``get_edge_index`` reads it whole;
    [`columns`][pipegnn.data.graph_store.DiskGraphStore.columns] gives the row pointers and the on-demand
    columns that plans read from.

    Attributes:
        folder: the folder of the files.
        bytes_read, read_calls: bytes and read system calls of column reads since the store was created.
    """

    def __init__(self, folder: str | Path):
        super().__init__()
        self.folder = Path(folder)
        self.bytes_read = 0
        self.read_calls = 0
        self._descriptors: dict[Path, int] = {}
        self._verified: set[str] = set()

    # --- files -----------------------------------------------------------------------------------

    def paths(self, edge_type: Any) -> dict[str, Path]:
        """The sidecar (``meta``) and the column files of ``edge_type``."""
        stem = _stem(edge_type)
        return {"meta": self.folder / f"{stem}.json", **{p: self.folder / f"{stem}.{p}.bin" for p in _PARTS}}

    def meta(self, edge_type: Any) -> dict[str, Any]:
        """The validated sidecar of ``edge_type`` (file sizes checked, contents not read).

        Raises:
            GraphFileError: missing or unreadable sidecar, or a file that does not match it.
        """
        paths = self.paths(edge_type)
        for path in paths.values():
            regular_or_absent(path, GraphFileError, "edge file")
        try:
            meta = read_json(paths["meta"])
        except FileNotFoundError:
            raise GraphFileError(f"no edge file {paths['meta']}") from None
        except (OSError, ValueError) as e:
            raise GraphFileError(f"unreadable edge sidecar {paths['meta']}: {e}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("layout") != "csc":
            raise GraphFileError(f"{paths['meta']}: not a CSC edge sidecar of format {FORMAT}")
        nodes, edges, weight = meta.get("num_nodes"), meta.get("num_edges"), meta.get("weight")
        if type(nodes) is not int or type(edges) is not int or nodes < 0 or edges < 0 or (
                weight is not None and weight not in DTYPES) or not isinstance(meta.get("checksum"), dict):
            raise GraphFileError(f"{paths['meta']}: malformed sidecar (num_nodes {nodes!r}, num_edges "
                                 f"{edges!r}, weight {weight!r})")
        if meta.get("byteorder") != sys.byteorder:
            raise GraphFileError(f"{paths['meta']}: written in {meta.get('byteorder')!r} byte order, this "
                                 f"machine is {sys.byteorder!r}")
        sizes = {"colptr": (nodes + 1) * 8, "row": edges * 8}
        if weight is not None:
            sizes["weight"] = edges * DTYPES[weight].itemsize
        for part, expected in sizes.items():
            try:
                size = paths[part].stat().st_size
            except OSError as e:
                raise GraphFileError(f"edge file {paths[part]} of {paths['meta']} is missing ({e})") from None
            if size != expected:
                raise GraphFileError(f"edge file {paths[part]} has {size} bytes, its sidecar says {expected} "
                                     "(truncated or rewritten?)")
        return meta

    def check(self, edge_type: Any, key: str | None = None, verify: bool = False) -> str | None:
        """Why ``edge_type`` is not usable (missing, mismatched, built for another ``key`` or, with
        ``verify``, content that does not match its checksums), or None."""
        try:
            meta = self.meta(edge_type)
            if key is not None and meta.get("key") != key:
                return f"built for key {meta.get('key')!r}, expected {key!r}"
            if verify:
                self._verify(edge_type)
        except GraphFileError as e:
            return str(e)
        return None

    def _verify(self, edge_type: Any) -> dict[str, Any]:
        """The sidecar, once the files match their checksums (once per store)."""
        stem = _stem(edge_type)
        meta = self.meta(edge_type)
        if stem in self._verified:
            return meta
        paths = self.paths(edge_type)
        for part in _PARTS:
            if part == "weight" and meta["weight"] is None:
                continue
            try:
                actual = file_checksum(paths[part])
            except OSError as e:
                raise GraphFileError(f"unreadable edge file {paths[part]}: {e}") from None
            if actual != meta["checksum"].get(part):
                raise GraphFileError(f"edge file {paths[part]} is damaged: content checksum {actual}, its "
                                     f"sidecar says {meta['checksum'].get(part)} (changed after it was "
                                     f"written); delete {self.folder} to have it rebuilt")
        self._verified.add(stem)
        return meta

    def descriptor(self, path: Path) -> int:
        """An open descriptor of ``path`` (opened on first use, closed by `close`)."""
        if path not in self._descriptors:
            self._descriptors[path] = os.open(path, os.O_RDONLY)
        return self._descriptors[path]

    # --- reading and writing ---------------------------------------------------------------------

    def columns(self, edge_type: Any) -> tuple[Tensor, EdgeColumn, EdgeColumn | None]:
        """``(colptr, row, weight)`` of ``edge_type`` once its files are verified: the row pointers in
        memory, sources and weights (None: unweighted) read by position.

        Raises:
            GraphFileError: files that do not match their sidecar or checksums, or row pointers that do
                not rise from 0 to the number of edges.
        """
        meta = self._verify(edge_type)
        paths, edges = self.paths(edge_type), meta["num_edges"]
        colptr = torch.from_numpy(np.fromfile(paths["colptr"], dtype=np.int64))
        if colptr[0] != 0 or colptr[-1] != edges or bool((colptr[1:] < colptr[:-1]).any()):
            raise GraphFileError(f"edge file {paths['colptr']}: row pointers do not rise from 0 to {edges}")
        row = EdgeColumn(self, paths["row"], torch.long, edges)
        weight = None if meta["weight"] is None else EdgeColumn(self, paths["weight"], DTYPES[meta["weight"]],
                                                                  edges)
        return colptr, row, weight

    def write(self, edge_type: Any, colptr: Tensor, row: Tensor, weight: Tensor | None = None,
              key: str = "") -> None:
        """Write ``edge_type`` in layout CSC (``row``, ``weight`` grouped by target by ``colptr``), in
        blocks, atomically: an old version stays readable until the new one is complete.

        Raises:
            OSError: the folder cannot be written.
            ValueError: arrays that do not fit each other, or an unsupported weight dtype.
        """
        edges = row.numel()
        if colptr.dim() != 1 or colptr.numel() < 1 or int(colptr[-1]) != edges or (
                weight is not None and weight.numel() != edges):
            raise ValueError(f"CSC of {colptr.numel() - 1} nodes and {edges} sources: colptr ends at "
                             f"{int(colptr[-1]) if colptr.numel() else None}, weights "
                             f"{None if weight is None else weight.numel()}")
        if weight is not None and str(weight.dtype).removeprefix("torch.") not in DTYPES:
            raise ValueError(f"unsupported edge weight dtype {weight.dtype}; valid: {', '.join(DTYPES)}")
        self._forget(edge_type)
        self.folder.mkdir(parents=True, exist_ok=True)
        clean_stale_temporaries(self.folder)
        paths = self.paths(edge_type)
        columns = {"colptr": colptr.to(torch.long), "row": row.to(torch.long), "weight": weight}
        checksums = {}
        for part, tensor in columns.items():
            if tensor is None:
                paths[part].unlink(missing_ok=True)
                continue
            with atomic_path(paths[part]) as tmp, open(tmp, "wb") as out:
                checksums[part] = stream_checksum(_written(tensor, out))
        meta = {"format": FORMAT, "layout": "csc", "edge_type": list(edge_type) if not isinstance(
                    edge_type, str) else edge_type, "num_nodes": colptr.numel() - 1, "num_edges": edges,
                "weight": None if weight is None else str(weight.dtype).removeprefix("torch."),
                "byteorder": sys.byteorder, "key": key, "checksum": checksums}
        with atomic_path(paths["meta"]) as tmp:
            Path(tmp).write_text(json.dumps(meta, indent=1))

    def _forget(self, edge_type: Any) -> None:
        self._verified.discard(_stem(edge_type))
        for path in self.paths(edge_type).values():
            fd = self._descriptors.pop(path, None)
            if fd is not None:
                os.close(fd)

    # --- GraphStore ------------------------------------------------------------------------------

    def _put_edge_index(self, edge_index: Any, edge_attr: EdgeAttr) -> bool:
        layout = edge_attr.layout.value
        if layout == "csc":
            row, colptr = edge_index
            self.write(edge_attr.edge_type, colptr, row)
            return True
        if layout == "coo" and edge_attr.size is not None:
            colptr, row, _ = csc(torch.stack(list(edge_index)), edge_attr.size[1])
            self.write(edge_attr.edge_type, colptr, row)
            return True
        raise ValueError(f"a DiskGraphStore stores layout csc, or coo with a size; got {layout}")

    def _get_edge_index(self, edge_attr: EdgeAttr) -> tuple[Tensor, Tensor] | None:
        if not self.paths(edge_attr.edge_type)["meta"].is_file():
            return None
        colptr, row, _ = self.columns(edge_attr.edge_type)
        rows = row[torch.arange(row.numel())]
        if edge_attr.layout.value == "csc":
            return rows, colptr
        if edge_attr.layout.value == "coo":
            return rows, torch.repeat_interleave(torch.arange(colptr.numel() - 1), colptr.diff())
        raise ValueError(f"a DiskGraphStore reads layout csc or coo; got {edge_attr.layout.value}")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        self._forget(edge_attr.edge_type)
        paths = self.paths(edge_attr.edge_type)
        existed = paths["meta"].is_file()
        for path in paths.values():  # the sidecar first: the edge type is gone at once
            path.unlink(missing_ok=True)
        return existed

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        attrs = []
        for side in sorted(self.folder.glob("*.json")):
            try:
                meta = read_json(side)
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("format") == FORMAT and meta.get("layout") == "csc":
                name, n = meta["edge_type"], meta["num_nodes"]
                attrs.append(EdgeAttr(name if isinstance(name, str) else tuple(name), "csc", size=(n, n)))
        return attrs

    def __repr__(self) -> str:
        return f"DiskGraphStore({str(self.folder)!r})"


def _written(tensor: Tensor, out: Any) -> Iterable[memoryview]:
    """``tensor``'s bytes in blocks, each once written to ``out``."""
    flat = tensor.detach().cpu().contiguous().view(-1)
    for start in range(0, max(flat.numel(), 1), _BLOCK):
        chunk = flat[start:start + _BLOCK].view(torch.uint8).numpy().data
        out.write(chunk)
        yield chunk


def cached_graph_store(folder: str | Path, edge_type: Any, key: str,
                       build: Callable[[], tuple[Tensor, Tensor, Tensor | None]]
                       ) -> tuple[DiskGraphStore, bool]:
    """The store in ``folder`` when ``edge_type`` there was built for ``key`` and its content matches its
    checksums; otherwise ``build()`` gives ``(colptr, row, weight)`` and they are written (a present
    file that does not match is rebuilt). Returns the store and whether it was already there.

    Raises:
        OSError: the folder cannot be written.
    """
    store = DiskGraphStore(folder)
    why = store.check(edge_type, key=key, verify=True)
    if why is None:
        return store, True
    if store.paths(edge_type)["meta"].exists():
        log.warning("ignoring cached edge files in %s (%s); rebuilding them", folder, why)
    store.write(edge_type, *build(), key=key)
    return store, False
