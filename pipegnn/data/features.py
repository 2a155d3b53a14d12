"""Node features on disk (``data.features=disk``): a PyG ``FeatureStore`` over raw row-major files, read
row by row without memory-mapping, and a copy of the rows in the order of a partition.

**File format.** One tensor of a store (group ``node``, attr ``x`` for the node features) is, in the
store's folder:

- ``node.x.bin``: the matrix, row-major, raw bytes in this machine's byte order;
- ``node.x.json``: its sidecar: format version, group, attr, dtype (``float32``, ``bfloat16``, ...),
  rows, cols, byte order, the row order, and the key it was built for (what the cache checks);
- ``node.x.order.npy``, when the rows are not in node order: the node id of every row (int64).

Nothing read from these files can execute code: JSON, raw bytes, and ``.npy`` read with
``allow_pickle=False``. A file that does not match its sidecar (size, dtype, order) raises
:class:`FeatureFileError` when read directly; the caches (:func:`cached_store`, :func:`partition_ordered`)
rebuild it with a warning instead, as :mod:`pipegnn.data.graph` does with cached graphs. Files are
written atomically (temporary file, then ``os.replace``; the sidecar last), so parallel jobs never read
half a file.

**Reads.** The file is never memory-mapped (``train.memory_limit_gb`` caps the address space, which
counts every mapping): the requested rows are mapped to file rows, sorted and deduplicated, coalesced
into runs of consecutive rows, and each run is read with one ``os.preadv`` straight into a preallocated
tensor; rows come back in the order asked, duplicates included (a row asked twice is read once and
returned twice). The store counts the bytes read and the read calls (:meth:`DiskFeatureStore.read_stats`).
It is dtype-agnostic: bytes are read as uint8 and viewed as the sidecar's dtype (bfloat16 too, which
NumPy lacks).

**Renumbering by partition.** The graph's loader writes the features once in node order (a synthetic
graph straight from its generator, block by block; a real graph, which is loaded whole once, from its
in-memory matrix), cached per dataset. Training then reads a second copy whose rows are ordered by the
training plan's partition (each part's nodes contiguous, ascending ids within a part), written once per
(source file, partition) by streaming blocks of rows from the first (:func:`partition_ordered`), so
that a micro-batch, whose rows are mostly its own part's, reads a few long runs. Node ids do not change
anywhere (plans, labels, outputs): the copy's sidecar carries its row order, and the store maps node
ids to file rows (``position[node]``) on every read.

Hand-written here because no library provides it: PyG's ``FeatureStore`` is only the interface
(implemented: ``_put_tensor``, ``_get_tensor``, ``_remove_tensor``, ``_get_tensor_size``,
``get_all_tensor_attrs``), and NumPy's and torch's file readers either map the file or read one
contiguous range per call.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

from pipegnn.errors import ConfigError

__all__ = ["ATTR", "GROUP", "STORAGE", "DiskFeatureStore", "FeatureFileError", "FeatureMeta", "FeatureRows",
           "cached_store", "files_opened", "partition_ordered"]

log = logging.getLogger(__name__)

#: ``data.features``: where the node features are kept while training.
STORAGE = ("memory", "disk")
#: Group and attribute name of the node features in a store.
GROUP, ATTR = "node", "x"
_FORMAT = 1  # bump when the file layout changes
_DTYPES = {str(d).removeprefix("torch."): d
           for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16)}
_BLOCK_BYTES = 64 << 20  # rows streamed per block when copying a file: about this many bytes
_opened = 0  # feature files this process opened for reading (see files_opened)


def files_opened() -> int:
    """How many feature files this process has opened for reading (so far)."""
    return _opened


class FeatureFileError(ValueError):
    """A feature file does not match its sidecar (missing, truncated, another dtype or shape)."""


@dataclass(frozen=True)
class FeatureMeta:
    """What a feature matrix holds and, when it is on disk, where: shaped like the matrix (``shape``,
    ``dtype``, ``to(dtype)``), so that a model can be sized from it before its rows are available.

    Attributes:
        rows, cols: nodes and features per node.
        dtype: element type.
        folder: the :class:`DiskFeatureStore` folder holding it (group ``node``, attr ``x``), or None
            when this process knows only the shape (a pipeline rank that never reads features).
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


@dataclass
class _Open:
    """A file opened for reading: its descriptor, sidecar, and node id -> file row (None: identity)."""

    fd: int
    meta: dict[str, Any]
    position: np.ndarray | None


def _index(index: Any, rows: int) -> np.ndarray | None:
    """Node ids of a TensorAttr index as int64 (None: all rows in node order), bounds-checked."""
    if index is None or (isinstance(index, slice) and index == slice(None)):
        return None
    if isinstance(index, slice):
        return np.arange(*index.indices(rows), dtype=np.int64)
    if isinstance(index, Tensor):
        index = index.detach().cpu().numpy()
    ids = np.asarray(index, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= rows):
        raise IndexError(f"node ids out of range [0, {rows}): min {ids.min()}, max {ids.max()}")
    return ids


def _runs(sorted_positions: np.ndarray) -> tuple[list[int], list[int]]:
    """First row and length of each run of consecutive rows in strictly increasing positions."""
    breaks = np.flatnonzero(np.diff(sorted_positions) != 1) + 1
    starts = np.concatenate(([0], breaks))
    lengths = np.diff(np.concatenate((starts, [sorted_positions.size])))
    return sorted_positions[starts].tolist(), lengths.tolist()


class DiskFeatureStore(FeatureStore):
    """A PyG ``FeatureStore`` whose tensors are raw row-major files in ``folder`` (see the module doc).

    ``store["node", "x", ids]`` (or ``get_tensor``) returns the rows of node ids ``ids`` (a Tensor,
    NumPy array, slice or int; None or ``slice(None)``: every row in node order) as a new CPU tensor,
    in the order asked. ``put_tensor(x, "node", "x", index=None)`` writes a whole tensor; with an index,
    it overwrites those rows of an existing file. Files are opened on first read and the open
    descriptors are not shared by copies (``copy.deepcopy`` and pickling give a store that reopens).

    Attributes:
        folder: the folder of the files.
        bytes_read, read_calls: bytes read and read system calls since the store was created.
    """

    def __init__(self, folder: str | Path):
        super().__init__()
        self.folder = Path(folder)
        self.bytes_read = 0
        self.read_calls = 0
        self._files: dict[tuple[str, str], _Open] = {}

    # --- files and sidecars ----------------------------------------------------------------------

    def _paths(self, group: str, attr: str) -> tuple[Path, Path, Path]:
        for name in (group, attr):
            if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
                raise ValueError(f"feature store names must be plain file-name parts, got {name!r}")
        stem = self.folder / f"{group}.{attr}"
        return stem.with_name(stem.name + ".bin"), stem.with_name(stem.name + ".json"), \
            stem.with_name(stem.name + ".order.npy")

    def _sidecar(self, group: str, attr: str) -> dict[str, Any]:
        """The validated sidecar of ``group.attr`` (file sizes checked, order not yet read).

        Raises:
            FeatureFileError: missing or unreadable sidecar, or a file that does not match it.
        """
        data, side, _ = self._paths(group, attr)
        try:
            meta = json.loads(side.read_text())
        except FileNotFoundError:
            raise FeatureFileError(f"no feature file {side}") from None
        except (OSError, ValueError) as e:
            raise FeatureFileError(f"unreadable feature sidecar {side}: {e}") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise FeatureFileError(f"{side}: not a feature sidecar of format {_FORMAT} "
                                   f"(format {meta.get('format') if isinstance(meta, dict) else None!r})")
        rows, cols, dtype, order = (meta.get(k) for k in ("rows", "cols", "dtype", "order"))
        if (type(rows) is not int or type(cols) is not int or rows < 0 or cols < 0
                or dtype not in _DTYPES or (order is not None and order != self._paths(group, attr)[2].name)):
            raise FeatureFileError(f"{side}: malformed sidecar (rows {rows!r}, cols {cols!r}, dtype {dtype!r}, "
                                   f"order {order!r})")
        if meta.get("byteorder") != sys.byteorder:
            raise FeatureFileError(f"{side}: written in {meta.get('byteorder')!r} byte order, this machine "
                                   f"is {sys.byteorder!r}")
        expected = rows * cols * _DTYPES[dtype].itemsize
        try:
            size = data.stat().st_size
        except OSError as e:
            raise FeatureFileError(f"feature file {data} of sidecar {side} is missing ({e})") from None
        if size != expected:
            raise FeatureFileError(f"feature file {data} has {size} bytes, its sidecar says {rows} x {cols} "
                                   f"{dtype} = {expected} bytes (truncated or rewritten?)")
        return meta

    def check(self, group: str = GROUP, attr: str = ATTR, key: str | None = None) -> str | None:
        """Why ``group.attr`` is not usable (missing, mismatched, or built for another ``key``), or None."""
        try:
            meta = self._sidecar(group, attr)
        except FeatureFileError as e:
            return str(e)
        if key is not None and meta.get("key") != key:
            return f"built for key {meta.get('key')!r}, expected {key!r}"
        return None

    def exists(self, group: str = GROUP, attr: str = ATTR) -> bool:
        return self._paths(group, attr)[1].is_file()

    def meta(self, group: str = GROUP, attr: str = ATTR) -> FeatureMeta:
        """Shape and dtype of ``group.attr`` (from its validated sidecar), with this store's folder."""
        meta = self._sidecar(group, attr)
        return FeatureMeta(meta["rows"], meta["cols"], _DTYPES[meta["dtype"]], self.folder)

    def file(self, group: str = GROUP, attr: str = ATTR) -> Path:
        """The raw file of ``group.attr``."""
        return self._paths(group, attr)[0]

    def _open(self, group: str, attr: str) -> _Open:
        key = (group, attr)
        if key not in self._files:
            global _opened
            meta = self._sidecar(group, attr)
            data, _, order_path = self._paths(group, attr)
            position = None
            if meta["order"] is not None:
                position = self._position(order_path, meta["rows"])
            self._files[key] = _Open(os.open(data, os.O_RDONLY), meta, position)
            _opened += 1
        return self._files[key]

    @staticmethod
    def _position(path: Path, rows: int) -> np.ndarray:
        """File row of every node from the order file (node id of every row), checked to be a
        permutation of ``range(rows)``."""
        try:
            order = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise FeatureFileError(f"unreadable row order {path}: {e}") from None
        if order.dtype != np.int64 or order.shape != (rows,):
            raise FeatureFileError(f"row order {path}: {order.dtype} {order.shape}, expected int64 ({rows},)")
        position = np.full(rows, -1, dtype=np.int64)
        if rows and (order.min() < 0 or order.max() >= rows):
            raise FeatureFileError(f"row order {path}: node ids outside [0, {rows})")
        position[order] = np.arange(rows, dtype=np.int64)
        if rows and position.min() < 0:
            raise FeatureFileError(f"row order {path} is not a permutation (a node appears twice)")
        return position

    def close(self) -> None:
        """Close the open files (a later read reopens them)."""
        for f in self._files.values():
            os.close(f.fd)
        self._files.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_files"] = {}  # descriptors belong to this object: a copy reopens
        return state

    # --- reading ---------------------------------------------------------------------------------

    def _pread(self, fd: int, view: memoryview, offset: int, path: Path) -> None:
        """Fill ``view`` from ``offset`` (short reads continued; end of file is an error)."""
        while view.nbytes:
            n = os.preadv(fd, [view], offset)
            self.read_calls += 1
            if n <= 0:
                raise FeatureFileError(f"feature file {path} ended at byte {offset}: truncated while in use")
            self.bytes_read += n
            view, offset = view[n:], offset + n

    def _read(self, group: str, attr: str, ids: np.ndarray | None) -> Tensor:
        f = self._open(group, attr)
        rows, cols, dtype = f.meta["rows"], f.meta["cols"], _DTYPES[f.meta["dtype"]]
        if ids is None:
            ids = np.arange(rows, dtype=np.int64)
        positions = ids if f.position is None else f.position[ids]
        inverse = None
        if positions.size > 1 and not bool(np.all(positions[1:] > positions[:-1])):
            positions, inverse = np.unique(positions, return_inverse=True)
        row_bytes = cols * dtype.itemsize
        buffer = torch.empty(positions.size * row_bytes, dtype=torch.uint8)
        if positions.size and row_bytes:
            view, at = memoryview(buffer.numpy()), 0
            path = self._paths(group, attr)[0]
            for start, length in zip(*_runs(positions)):  # one read per run of consecutive rows
                size = length * row_bytes
                self._pread(f.fd, view[at:at + size], start * row_bytes, path)
                at += size
        out = buffer.view(dtype).view(positions.size, cols)
        return out if inverse is None else out[torch.from_numpy(inverse.reshape(-1))]

    def read_stats(self) -> dict[str, int]:
        """``{"bytes": bytes read, "calls": read system calls}`` since the store was created."""
        return {"bytes": self.bytes_read, "calls": self.read_calls}

    # --- writing ---------------------------------------------------------------------------------

    def write(self, blocks: Iterable[Tensor], *, rows: int, cols: int, dtype: torch.dtype,
              group: str = GROUP, attr: str = ATTR, order: Tensor | None = None, key: str = "") -> None:
        """Write ``group.attr`` from row blocks (each ``[b, cols]``, cast to ``dtype``), streaming: one
        block in memory at a time. ``order``: the node id of every row (None: node order). Atomic: the
        old tensor, if any, stays readable until the new one is complete.

        Raises:
            OSError: the folder cannot be written.
            ValueError: the blocks do not add up to ``rows`` x ``cols``.
        """
        if str(dtype).removeprefix("torch.") not in _DTYPES:
            raise ValueError(f"unsupported feature dtype {dtype}; valid: {', '.join(_DTYPES)}")
        data, side, order_path = self._paths(group, attr)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._forget(group, attr)
        written = 0
        with _atomic(data) as tmp, open(tmp, "wb") as out:
            for block in blocks:
                block = block.detach().to("cpu", dtype).contiguous()
                if block.dim() != 2 or block.size(1) != cols:
                    raise ValueError(f"feature block of shape {tuple(block.shape)}, expected [*, {cols}]")
                out.write(memoryview(block.view(-1).view(torch.uint8).numpy()))
                written += block.size(0)
            if written != rows:
                raise ValueError(f"feature blocks hold {written} rows, expected {rows}")
        if order is not None:
            with _atomic(order_path) as tmp, open(tmp, "wb") as out:
                np.save(out, order.detach().cpu().to(torch.int64).numpy(), allow_pickle=False)
        else:
            order_path.unlink(missing_ok=True)
        meta = {"format": _FORMAT, "group": group, "attr": attr, "dtype": str(dtype).removeprefix("torch."),
                "rows": rows, "cols": cols, "byteorder": sys.byteorder,
                "order": None if order is None else order_path.name, "key": key}
        with _atomic(side) as tmp:
            Path(tmp).write_text(json.dumps(meta, indent=1))

    def _forget(self, group: str, attr: str) -> None:
        f = self._files.pop((group, attr), None)
        if f is not None:
            os.close(f.fd)

    # --- FeatureStore ----------------------------------------------------------------------------

    def _put_tensor(self, tensor: Tensor, attr: TensorAttr) -> bool:
        group, name = attr.group_name, attr.attr_name
        if tensor.dim() != 2:
            raise ValueError(f"a feature tensor is [rows, cols], got shape {tuple(tensor.shape)}")
        if attr.index is None or (isinstance(attr.index, slice) and attr.index == slice(None)):
            self.write([tensor], rows=tensor.size(0), cols=tensor.size(1), dtype=tensor.dtype, group=group,
                       attr=name)
            return True
        # Overwrite rows in place: one write per run of consecutive file rows.
        meta = self._sidecar(group, name)
        dtype = _DTYPES[meta["dtype"]]
        ids = _index(attr.index, meta["rows"])
        if ids is None or tensor.shape != (ids.size, meta["cols"]):
            raise ValueError(f"{tuple(tensor.shape)} rows for {0 if ids is None else ids.size} ids of a "
                             f"{meta['rows']} x {meta['cols']} tensor")
        position = None if meta["order"] is None else self._position(self._paths(group, name)[2], meta["rows"])
        positions = ids if position is None else position[ids]
        if np.unique(positions).size != positions.size:
            raise ValueError("put_tensor with an index: every node id at most once")
        by_position = np.argsort(positions, kind="stable")
        values = tensor.detach().to("cpu", dtype).contiguous()[torch.from_numpy(by_position)]
        data = values.view(-1).view(torch.uint8).numpy()
        row_bytes = meta["cols"] * dtype.itemsize
        fd = os.open(self._paths(group, name)[0], os.O_WRONLY)
        try:
            at = 0
            for start, length in zip(*_runs(positions[by_position])):
                chunk = memoryview(data)[at:at + length * row_bytes]
                while chunk.nbytes:
                    n = os.pwrite(fd, chunk, start * row_bytes)
                    chunk, start = chunk[n:], start + n // row_bytes
                at += length * row_bytes
        finally:
            os.close(fd)
        return True

    def _get_tensor(self, attr: TensorAttr) -> Tensor | None:
        group, name = attr.group_name, attr.attr_name
        if not self.exists(group, name):
            return None
        f = self._open(group, name)
        if isinstance(attr.index, (int, np.integer)) and not isinstance(attr.index, bool):
            return self._read(group, name, _index([attr.index], f.meta["rows"]))[0]
        return self._read(group, name, _index(attr.index, f.meta["rows"]))

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        group, name = attr.group_name, attr.attr_name
        self._forget(group, name)
        paths = self._paths(group, name)
        existed = paths[1].is_file()
        for path in (paths[1], paths[0], paths[2]):  # the sidecar first: the tensor is gone at once
            path.unlink(missing_ok=True)
        return existed

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        group, name = attr.group_name, attr.attr_name
        if not self.exists(group, name):
            return None
        meta = self._sidecar(group, name)
        index = attr.index if attr.is_set("index") else None
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            return (meta["cols"],)
        ids = _index(index, meta["rows"])
        return (meta["rows"] if ids is None else ids.size, meta["cols"])

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        attrs = []
        for side in sorted(self.folder.glob("*.json")):
            try:
                meta = json.loads(side.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("format") == _FORMAT and side.name == \
                    f"{meta.get('group')}.{meta.get('attr')}.json":
                attrs.append(TensorAttr(group_name=meta["group"], attr_name=meta["attr"]))
        return attrs

    def __repr__(self) -> str:
        return f"DiskFeatureStore({str(self.folder)!r})"


class _atomic:
    """A temporary file beside ``path`` (yielded as a str) that replaces ``path`` when the block ends
    without an error, and is removed otherwise."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> str:
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        os.close(fd)
        return self.tmp

    def __exit__(self, kind: Any, *_: Any) -> None:
        try:
            if kind is None:
                os.replace(self.tmp, self.path)
        finally:
            Path(self.tmp).unlink(missing_ok=True)


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

    def __deepcopy__(self, memo: dict) -> "FeatureRows":
        return self  # a view of files, shared like the files themselves

    def __repr__(self) -> str:
        return f"FeatureRows({self.store!r}, {self.group}.{self.attr}, {tuple(self.shape)}, {self.dtype})"


def cached_store(folder: str | Path, key: str, write: Callable[[DiskFeatureStore], Any]) -> DiskFeatureStore:
    """The store in ``folder`` when its node features were built for ``key``; otherwise ``write(store)``
    builds them (a present file that does not match is rebuilt, with a warning).

    Raises:
        ConfigError: the folder cannot be written (``data.features=disk`` needs a writable cache).
    """
    store = DiskFeatureStore(folder)
    why = store.check(key=key)
    if why is None:
        return store
    if store.exists():
        log.warning("ignoring cached feature file in %s (%s); rebuilding it", folder, why)
    try:
        write(store)
    except OSError as e:
        raise ConfigError(f"data.features=disk: the feature file cannot be written under {folder} ({e}); "
                          "make data.cache writable or use data.features=memory") from e
    return store


def partition_ordered(source: DiskFeatureStore, part: Tensor, dtype: torch.dtype | None = None
                      ) -> tuple[DiskFeatureStore, bool]:
    """The node features of ``source`` in a copy whose rows are ordered by ``part`` (the ``[N]`` part id
    of every node: each part's nodes contiguous, ascending node ids within a part), in ``dtype`` (None:
    the source's), in ``<source folder>/part-<key>``. Built once per source file, partition and dtype,
    by streaming blocks of rows from the source (never the whole matrix at once); reused afterwards.

    Returns:
        The store and whether it was already there. When the folder cannot be written, the source
        itself (node order), with a warning.
    """
    meta = source.meta()
    dtype = dtype or meta.dtype
    part = part.to(torch.int64).contiguous()
    if part.shape != (meta.rows,):
        raise ValueError(f"partition of {part.numel()} nodes for features of {meta.rows} nodes")
    h = hashlib.sha1(json.dumps({"format": _FORMAT, "source": source._sidecar(GROUP, ATTR).get("key"),
                                 "dtype": str(dtype)}).encode())
    h.update(part.numpy().tobytes())
    key = h.hexdigest()[:24]
    store = DiskFeatureStore(source.folder / f"part-{key[:16]}")
    why = store.check(key=key)
    if why is None:
        return store, True
    if store.exists():
        log.warning("ignoring partition-ordered feature file in %s (%s); rebuilding it", store.folder, why)
    order = torch.argsort(part, stable=True)
    block = max(1, _BLOCK_BYTES // max(1, meta.cols * meta.dtype.itemsize))
    blocks = (source.get_tensor(GROUP, ATTR, index=order[s:s + block]) for s in range(0, meta.rows, block))
    try:
        store.write(blocks, rows=meta.rows, cols=meta.cols, dtype=dtype, order=order, key=key)
    except OSError as e:
        log.warning("feature cache folder %s cannot be written (%s); reading the features in node order",
                    store.folder, e)
        return source, False
    return store, False
