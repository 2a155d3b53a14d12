"""The files of one tensor of a feature store (group ``node``, attr ``x`` for the node features), in the
store's folder:

- ``node.x.bin``: the matrix, row-major, raw bytes in this machine's byte order;
- ``node.x.json``: its sidecar: format version, group, attr, dtype (``float32``, ``bfloat16``, ...),
  rows, cols, byte order, the row order, the key it was built for (what the cache checks) and the
  content checksums of the matrix and the row order ([`pipegnn.integrity`][pipegnn.integrity]);
- ``node.x.order.npy``, when the rows are not in node order: the node id of every row (int64).

Nothing read from these files can execute code: JSON, raw bytes, and ``.npy`` read with
``allow_pickle=False``. A file that does not match its sidecar (size, dtype, order) raises
[`FeatureFileError`][pipegnn.data.features.files.FeatureFileError], and so does content that does not match
its checksum ([`verify_files`][pipegnn.data.features.files.verify_files], a whole read of the files: 6.5-8.8 s
per 6 GiB, ``results/benchmarks/integrity.txt``). Files are written atomically (temporary file, then
``os.replace``; the sidecar last), so parallel jobs never read half a file. A temporary file names its
writer's host and pid; one whose writer is gone (killed mid-write) is removed by the next write in its
folder and whenever the dataset's features are looked up
([`clean_stale_temporaries`][pipegnn.atomic.clean_stale_temporaries]). A sidecar, matrix or order
path that is not a regular file (a FIFO, a folder) is an error naming it, found by ``stat`` before anything
opens it.
"""
from __future__ import annotations

import json
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor

from pipegnn.atomic import atomic_path, clean_stale_temporaries
from pipegnn.integrity import file_checksum, stream_checksum
from pipegnn.jsonfile import read_json

log = logging.getLogger(__name__)

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Group and attribute name of the node features in a store.
GROUP, ATTR = "node", "x"
#: Version of the file layout (bump when it changes; 2: content checksums in the sidecar).
FORMAT = 2
#: The dtypes a feature file may hold, by their name in the sidecar.
DTYPES = {str(d).removeprefix("torch."): d
          for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16)}


class FeatureFileError(ValueError):
    """A feature file does not match its sidecar (missing, truncated, another dtype or shape)."""


def paths(folder: Path, group: str, attr: str) -> tuple[Path, Path, Path]:
    """The raw file, sidecar and order file of ``group.attr`` in ``folder``."""
    for name in (group, attr):
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise ValueError(f"feature store names must be plain file-name parts, got {name!r}")
    stem = f"{group}.{attr}"
    return folder / f"{stem}.bin", folder / f"{stem}.json", folder / f"{stem}.order.npy"


#: The most bytes a ``.npy`` file's header takes (format 1.0: a 2-byte length; ``np.save`` writes 1.0 for
#: a 1-D int64 array).
_NPY_HEADER_BYTES = 10 + 0xFFFF


def read_sidecar(folder: Path, group: str, attr: str) -> dict[str, Any]:
    """The validated sidecar of ``group.attr`` (the sizes of the matrix and the row order checked, the
    order not yet read).

    Raises:
        FeatureFileError: missing or unreadable sidecar, or a file that does not match it.
    """
    data, side, order_path = paths(folder, group, attr)
    for path in (side, data, order_path):  # a FIFO (or a device) would block the read that follows
        regular_or_absent(path)
    try:
        meta = read_json(side)
    except FileNotFoundError:
        raise FeatureFileError(f"no feature file {side}") from None
    except (OSError, ValueError) as e:  # JSONFileError: damaged, nested too deeply
        raise FeatureFileError(f"unreadable feature sidecar {side}: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise FeatureFileError(f"{side}: not a feature sidecar of format {FORMAT} "
                               f"(format {meta.get('format') if isinstance(meta, dict) else None!r})")
    rows, cols, dtype, order = (meta.get(k) for k in ("rows", "cols", "dtype", "order"))
    if (type(rows) is not int or type(cols) is not int or rows < 0 or cols < 0
            or dtype not in DTYPES or (order is not None and order != order_path.name)):
        raise FeatureFileError(f"{side}: malformed sidecar (rows {rows!r}, cols {cols!r}, dtype {dtype!r}, "
                               f"order {order!r})")
    if meta.get("byteorder") != sys.byteorder:
        raise FeatureFileError(f"{side}: written in {meta.get('byteorder')!r} byte order, this machine "
                               f"is {sys.byteorder!r}")
    expected = rows * cols * DTYPES[dtype].itemsize
    try:
        size = data.stat().st_size
    except OSError as e:
        raise FeatureFileError(f"feature file {data} of sidecar {side} is missing ({e})") from None
    if size != expected:
        raise FeatureFileError(f"feature file {data} has {size} bytes, its sidecar says {rows} x {cols} "
                               f"{dtype} = {expected} bytes (truncated or rewritten?)")
    if order is not None:  # its checksum reads it whole: bounded first (a 1 TB sparse one hung a run)
        try:
            order_size = order_path.stat().st_size
        except OSError as e:
            raise FeatureFileError(f"row order {order_path} of sidecar {side} is missing ({e})") from None
        if not 8 * rows < order_size <= 8 * rows + _NPY_HEADER_BYTES:
            raise FeatureFileError(f"row order {order_path} has {order_size} bytes, its sidecar's {rows} "
                                   f"rows take {8 * rows} and a header of at most {_NPY_HEADER_BYTES} "
                                   "(truncated or rewritten?)")
    return meta


def regular_or_absent(path: Path, error: type[ValueError] = FeatureFileError, what: str = "feature file"
                      ) -> None:
    """``path`` is a regular file or nothing (``os.stat``: never opened, so a FIFO cannot block).

    Raises:
        error: naming the path (a ``what``) and what it is.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise error(f"{what} {path} cannot be read: {e}") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise error(f"{what} {path} is {kind}; delete it to have the file rebuilt")


def runs(sorted_positions: np.ndarray, gap: int = 1) -> tuple[list[int], list[int]]:
    """First item and length of each run of strictly increasing positions in which consecutive ones are
    at most ``gap`` apart (1: consecutive items only; more: a read also covers the gaps, fewer calls)."""
    breaks = np.flatnonzero(np.diff(sorted_positions) > gap) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks - 1, [sorted_positions.size - 1]))
    return sorted_positions[starts].tolist(), (sorted_positions[ends] - sorted_positions[starts] + 1).tolist()


def pread_full(fd: int, view: memoryview, offset: int, path: Path,
               error: type[ValueError] = FeatureFileError) -> int:
    """Fill ``view`` from byte ``offset`` of the open file ``fd`` (``os.preadv``, short reads continued);
    returns the read calls made.

    Raises:
        error: the file ended first (truncated while in use).
    """
    calls = 0
    while view.nbytes:
        n = os.preadv(fd, [view], offset)
        calls += 1
        if n <= 0:
            raise error(f"file {path} ended at byte {offset}: truncated while in use")
        view, offset = view[n:], offset + n
    return calls


def read_position(path: Path, rows: int) -> np.ndarray:
    """File row of every node from the order file ``path`` (node id of every row), checked to be a
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


def verify_files(folder: Path, group: str, attr: str) -> dict[str, Any]:
    """The sidecar of ``group.attr`` once the matrix and the row order are checked against their
    content checksums (a whole read of both files).

    Raises:
        FeatureFileError: a file that does not match its sidecar or its checksum, naming it and how to
            clear it.
    """
    meta = read_sidecar(folder, group, attr)
    data, side, order_path = paths(folder, group, attr)
    checksums = meta.get("checksum")
    if not isinstance(checksums, dict):
        raise FeatureFileError(f"{side}: no content checksums")
    files = [("data", data)] + ([("order", order_path)] if meta["order"] is not None else [])
    for name, path in files:
        try:
            actual = file_checksum(path)
        except OSError as e:
            raise FeatureFileError(f"unreadable feature file {path}: {e}") from None
        if actual != checksums.get(name):
            raise FeatureFileError(f"feature file {path} is damaged: content checksum {actual}, its sidecar "
                                   f"{side.name} says {checksums.get(name)} (changed after it was written); "
                                   f"delete {folder} to have it rebuilt")
    if meta["order"] is not None:
        read_position(order_path, meta["rows"])
    return meta


def reseal(folder: Path, group: str, attr: str) -> None:
    """Record the matrix's current content checksum in its sidecar (after rows were overwritten in
    place)."""
    data, side, _ = paths(folder, group, attr)
    meta = read_sidecar(folder, group, attr)
    meta["checksum"] = {**meta.get("checksum", {}), "data": file_checksum(data)}
    with atomic_path(side) as tmp:
        Path(tmp).write_text(json.dumps(meta, indent=1))


def write_files(folder: Path, blocks: Iterable[Tensor], *, rows: int, cols: int, dtype: torch.dtype,
                group: str, attr: str, order: Tensor | None, key: str) -> None:
    """Write the files of ``group.attr`` from row blocks (each ``[b, cols]``, cast to ``dtype``), one
    block in memory at a time; ``order``: the node id of every row (None: node order). Atomic: the old
    files, if any, stay readable until the new ones are complete.

    Raises:
        OSError: the folder cannot be written.
        ValueError: an unsupported dtype, or blocks that do not add up to ``rows`` x ``cols``.
    """
    if str(dtype).removeprefix("torch.") not in DTYPES:
        raise ValueError(f"unsupported feature dtype {dtype}; valid: {', '.join(DTYPES)}")
    data, side, order_path = paths(folder, group, attr)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in clean_stale_temporaries(folder):
        log.info("removed %s, a temporary file of a killed write", stale)
    written = 0

    def written_rows(out: Any) -> Iterable[memoryview]:
        """Each block's bytes, once written to ``out``."""
        nonlocal written
        for block in blocks:
            block = block.detach().to("cpu", dtype).contiguous()
            if block.dim() != 2 or block.size(1) != cols:
                raise ValueError(f"feature block of shape {tuple(block.shape)}, expected [*, {cols}]")
            chunk = block.view(-1).view(torch.uint8).numpy().data
            out.write(chunk)
            written += block.size(0)
            yield chunk

    with atomic_path(data) as tmp, open(tmp, "wb") as out:
        checksum = stream_checksum(written_rows(out))
        if written != rows:
            raise ValueError(f"feature blocks hold {written} rows, expected {rows}")
    checksums = {"data": checksum}
    if order is not None:
        with atomic_path(order_path) as tmp:
            with open(tmp, "wb") as out:
                np.save(out, order.detach().cpu().to(torch.int64).numpy(), allow_pickle=False)
            checksums["order"] = file_checksum(tmp)
    else:
        order_path.unlink(missing_ok=True)
    meta = {"format": FORMAT, "group": group, "attr": attr, "dtype": str(dtype).removeprefix("torch."),
            "rows": rows, "cols": cols, "byteorder": sys.byteorder,
            "order": None if order is None else order_path.name, "key": key, "checksum": checksums}
    with atomic_path(side) as tmp:
        Path(tmp).write_text(json.dumps(meta, indent=1))


def remove_files(folder: Path, group: str, attr: str) -> bool:
    """Remove the files of ``group.attr``, the sidecar first (the tensor is gone at once); whether it
    had one."""
    data, side, order_path = paths(folder, group, attr)
    existed = side.is_file()
    for path in (side, data, order_path):
        path.unlink(missing_ok=True)
    return existed


def stored_tensors(folder: Path) -> list[tuple[str, str]]:
    """``(group, attr)`` of every tensor in ``folder`` with a sidecar of this format, by sidecar name."""
    found = []
    for side in sorted(folder.glob("*.json")):
        try:
            meta = read_json(side)
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("format") == FORMAT and side.name == \
                f"{meta.get('group')}.{meta.get('attr')}.json":
            found.append((meta["group"], meta["attr"]))
    return found


class OpenFiles:
    """Read-only descriptors a store keeps open by key in ``_descriptors`` (a descriptor, or a record
    with its ``fd``): closed by `close`, when the store is collected, and left out of a pickled copy
    (which reopens them). Shared by the feature store and the graph store."""

    _descriptors: dict[Any, Any]

    def close(self) -> None:
        """Close the open files (a later read reopens them)."""
        for value in self._descriptors.values():
            os.close(value if isinstance(value, int) else value.fd)
        self._descriptors.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_descriptors"] = {}  # descriptors belong to this object: a copy reopens
        return state
