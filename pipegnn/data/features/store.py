"""A PyG ``FeatureStore`` over raw row-major feature files
([`pipegnn.data.features.files`][pipegnn.data.features.files]), read row by row without memory-mapping.

**Reads.** The file is never memory-mapped (``train.memory_limit_gb`` caps the address space, which
counts every mapping): the requested rows are mapped to file rows, sorted and deduplicated, coalesced
into runs of consecutive rows, and each run is read with one ``os.preadv`` straight into a preallocated
tensor; rows come back in the order asked, duplicates included (a row asked twice is read once and
returned twice). The store counts the bytes read and the read calls
([`DiskFeatureStore.read_stats`][pipegnn.data.features.store.DiskFeatureStore.read_stats]). It is
dtype-agnostic: bytes are read as uint8 and viewed as the sidecar's dtype (bfloat16 too, which NumPy lacks). A
file whose rows are not in node order (a partition-ordered copy) is read through its row order: node ids never
change, the store maps them to file rows (``position[node]``) on every read.

**Integrity.** Before its first read, a store checks a tensor's files against their content checksums
(one whole read; [`verify_files`][pipegnn.data.features.files.verify_files]), or `check` with
``verify=True`` did: damaged files raise [`FeatureFileError`][pipegnn.data.features.files.FeatureFileError],
never serve rows.

Hand-written here because no library provides it: PyG's ``FeatureStore`` is only the interface
(implemented: ``_put_tensor``, ``_get_tensor``, ``_remove_tensor``, ``_get_tensor_size``,
``get_all_tensor_attrs``), and NumPy's and torch's file readers either map the file or read one
contiguous range per call.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

from pipegnn.data.features.files import (
    ATTR,
    DTYPES,
    GROUP,
    FeatureFileError,
    OpenFiles,
    paths,
    pread_full,
    read_position,
    read_sidecar,
    remove_files,
    reseal,
    runs,
    stored_tensors,
    verify_files,
    write_files,
)
from pipegnn.data.features.matrix import FeatureMeta

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

_opened = 0  # feature files this process opened for reading (see files_opened)


def files_opened() -> int:
    """How many feature files this process has opened for reading (so far)."""
    return _opened


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


class DiskFeatureStore(OpenFiles, FeatureStore):
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
        self._descriptors: dict[tuple[str, str], _Open] = {}
        self._verified: set[tuple[str, str]] = set()  # content checked against the checksums

    # --- files -----------------------------------------------------------------------------------

    def check(self, group: str = GROUP, attr: str = ATTR, key: str | None = None,
              verify: bool = False) -> str | None:
        """Why ``group.attr`` is not usable (missing, mismatched, built for another ``key`` or, with
        ``verify``, content that does not match its checksums or an unreadable row order), or None."""
        try:
            meta = read_sidecar(self.folder, group, attr)
            if key is not None and meta.get("key") != key:
                return f"built for key {meta.get('key')!r}, expected {key!r}"
            if verify:
                self._verify(group, attr)
        except FeatureFileError as e:
            return str(e)
        return None

    def _verify(self, group: str, attr: str) -> dict[str, Any]:
        """The sidecar, the files checked against their checksums (once per store)."""
        meta = verify_files(self.folder, group, attr)
        self._verified.add((group, attr))
        return meta

    def exists(self, group: str = GROUP, attr: str = ATTR) -> bool:
        return paths(self.folder, group, attr)[1].is_file()

    def meta(self, group: str = GROUP, attr: str = ATTR) -> FeatureMeta:
        """Shape and dtype of ``group.attr`` (from its validated sidecar), with this store's folder."""
        meta = read_sidecar(self.folder, group, attr)
        return FeatureMeta(meta["rows"], meta["cols"], DTYPES[meta["dtype"]], self.folder)

    def file(self, group: str = GROUP, attr: str = ATTR) -> Path:
        """The raw file of ``group.attr``."""
        return paths(self.folder, group, attr)[0]

    def _open(self, group: str, attr: str) -> _Open:
        key = (group, attr)
        if key not in self._descriptors:
            global _opened
            meta = (read_sidecar(self.folder, group, attr) if key in self._verified
                    else self._verify(group, attr))
            data, _, order_path = paths(self.folder, group, attr)
            position = None
            if meta["order"] is not None:
                position = read_position(order_path, meta["rows"])
            self._descriptors[key] = _Open(os.open(data, os.O_RDONLY), meta, position)
            _opened += 1
        return self._descriptors[key]

    def _forget(self, group: str, attr: str) -> None:
        self._verified.discard((group, attr))
        f = self._descriptors.pop((group, attr), None)
        if f is not None:
            os.close(f.fd)

    # --- reading ---------------------------------------------------------------------------------

    def _read(self, group: str, attr: str, ids: np.ndarray | None) -> Tensor:
        f = self._open(group, attr)
        rows, cols, dtype = f.meta["rows"], f.meta["cols"], DTYPES[f.meta["dtype"]]
        if ids is None:
            ids = np.arange(rows, dtype=np.int64)
        positions = ids if f.position is None else f.position[ids]
        inverse = None
        if positions.size > 1 and not bool(np.all(positions[1:] > positions[:-1])):
            positions, inverse = np.unique(positions, return_inverse=True)
        row_bytes = cols * dtype.itemsize
        buffer = torch.empty(positions.size * row_bytes, dtype=torch.uint8)
        if positions.size and row_bytes:
            view, at = buffer.numpy().data, 0
            path = self.file(group, attr)
            for start, length in zip(*runs(positions)):  # one read per run of consecutive rows
                size = length * row_bytes
                self.read_calls += pread_full(f.fd, view[at:at + size], start * row_bytes, path)
                self.bytes_read += size
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
            ValueError: an unsupported dtype, or blocks that do not add up to ``rows`` x ``cols``.
        """
        self._forget(group, attr)
        write_files(self.folder, blocks, rows=rows, cols=cols, dtype=dtype, group=group, attr=attr,
                    order=order, key=key)

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
        meta = read_sidecar(self.folder, group, name)
        dtype = DTYPES[meta["dtype"]]
        ids = _index(attr.index, meta["rows"])
        assert ids is not None  # a whole-tensor index was written above
        if tensor.shape != (ids.size, meta["cols"]):
            raise ValueError(f"{tuple(tensor.shape)} rows for {ids.size} ids of a "
                             f"{meta['rows']} x {meta['cols']} tensor")
        data_path, _, order_path = paths(self.folder, group, name)
        positions = ids if meta["order"] is None else read_position(order_path, meta["rows"])[ids]
        if np.unique(positions).size != positions.size:
            raise ValueError("put_tensor with an index: every node id at most once")
        by_position = np.argsort(positions, kind="stable")
        values = tensor.detach().to("cpu", dtype).contiguous()[torch.from_numpy(by_position)]
        data = values.view(-1).view(torch.uint8).numpy()
        row_bytes = meta["cols"] * dtype.itemsize
        fd = os.open(data_path, os.O_WRONLY)
        try:
            at = 0
            for start, length in zip(*runs(positions[by_position])):
                chunk = data.data[at:at + length * row_bytes]
                while chunk.nbytes:
                    n = os.pwrite(fd, chunk, start * row_bytes)
                    chunk, start = chunk[n:], start + n // row_bytes
                at += length * row_bytes
        finally:
            os.close(fd)
        self._forget(group, name)
        reseal(self.folder, group, name)
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
        self._forget(attr.group_name, attr.attr_name)
        return remove_files(self.folder, attr.group_name, attr.attr_name)

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...] | None:
        group, name = attr.group_name, attr.attr_name
        if not self.exists(group, name):
            return None
        meta = read_sidecar(self.folder, group, name)
        index = attr.index if attr.is_set("index") else None
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            return (meta["cols"],)
        ids = _index(index, meta["rows"])
        return (meta["rows"] if ids is None else ids.size, meta["cols"])

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group_name=group, attr_name=attr) for group, attr in stored_tensors(self.folder)]

    def __repr__(self) -> str:
        return f"DiskFeatureStore({str(self.folder)!r})"
