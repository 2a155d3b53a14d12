"""Result records on disk: one ``result.json`` per run, written atomically, found, read and checked.

This module knows files only; :mod:`pipegnn.results.table` aggregates records into tables and
:mod:`pipegnn.results.sweep` matches them with a sweep's jobs.
"""
from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from pipegnn.atomic import atomic_file
from pipegnn.jsonfile import JSONFileError, read_json

__all__ = ["RECORD_NAME", "RECORD_ROOM", "RecordError", "atomic_file", "check_record", "find_records",
           "load_record", "natural_key", "probe_record_folder", "record_of", "write_record"]

RECORD_NAME = "result.json"

#: Room a record needs, which :func:`probe_record_folder` checks (a long run's record, every epoch's
#: entry, is some hundreds of KiB).
RECORD_ROOM = 1 << 20


def probe_record_folder(directory: str | Path, name: str = RECORD_NAME) -> None:
    """Check, before a run trains, that ``directory/<name>`` can be written: not a folder, and room for
    :data:`RECORD_ROOM` bytes in a writable folder (a probe file, written, synced and removed).

    Raises:
        OSError: naming the file and the cause (IsADirectoryError, PermissionError, No space left...).
    """
    path = Path(directory) / name
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR,
                                f"{path} is a folder, so the run's record cannot be written there")
    probe = Path(directory) / f".{name}.probe-{os.getpid()}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(bytes(RECORD_ROOM))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise OSError(e.errno, f"{path} could not be written: {e.strerror or e}") from e
    finally:
        probe.unlink(missing_ok=True)


def write_record(directory: str | Path, record: dict[str, Any], name: str = RECORD_NAME) -> Path:
    """Write ``record`` as ``directory/<name>`` (``result.json``) atomically (a reader never sees half
    a file).

    Raises:
        OSError: naming the file and the cause.
    """
    path = Path(directory) / name
    with atomic_file(path) as f:
        json.dump(record, f, indent=2, default=str)
        f.write("\n")
    return path


class RecordError(JSONFileError):
    """A record file that cannot be used: not valid JSON (nesting too deep included), or not shaped like
    a record.

    ``str()`` names the file; ``path`` and ``reason`` hold the two parts."""


#: Record sections that are JSON objects (or null / absent).
_SECTIONS = ("config", "choices", "env", "dataset", "model", "final", "timing", "memory", "microbatch",
             "pipeline")


def _kind(value: Any) -> str:
    """The JSON name of ``value``'s type."""
    for kind, types in (("null", type(None)), ("a boolean", bool), ("a number", (int, float)),
                        ("a string", str), ("an array", (list, tuple)), ("an object", Mapping)):
        if isinstance(value, types):
            return kind
    return type(value).__name__


def check_record(record: Any) -> dict[str, Any]:
    """``record`` when it is shaped like a record, else :class:`ValueError` naming the first problem:
    a JSON object whose ``status`` is a string, ``error`` and ``traceback`` strings or null, each section
    (``config``, ``final``, ``timing``, ...) an object or null, ``epochs`` and ``pipeline.stages`` arrays
    of objects, ``choices`` values scalars. Sections and values may be absent (failed runs lack many)."""
    if not isinstance(record, dict):
        raise ValueError(f"not a JSON object but {_kind(record)}")
    if not isinstance(record.get("status"), str):
        raise ValueError(f"'status' is {_kind(record.get('status'))}, expected a string")
    for key in ("error", "traceback"):
        if not isinstance(record.get(key), (str, type(None))):
            raise ValueError(f"'{key}' is {_kind(record[key])}, expected a string or null")
    for key in _SECTIONS:
        if not isinstance(record.get(key), (dict, type(None))):
            raise ValueError(f"'{key}' is {_kind(record[key])}, expected an object")
    checks = [("epochs", record.get("epochs"), True)]
    pipeline, memory = record.get("pipeline") or {}, record.get("memory") or {}
    checks += [("pipeline.stages", pipeline.get("stages"), True),
               ("pipeline.balance", pipeline.get("balance"), False)]
    for key, value, of_objects in checks:
        if value is None:
            continue
        if not isinstance(value, list):
            raise ValueError(f"'{key}' is {_kind(value)}, expected an array")
        bad = next((v for v in value if not isinstance(v, dict)), None) if of_objects else None
        if bad is not None:
            raise ValueError(f"'{key}' holds {_kind(bad)}, expected objects")
    if not isinstance(memory.get("peak_device_bytes"), (dict, type(None))):
        raise ValueError(f"'memory.peak_device_bytes' is {_kind(memory['peak_device_bytes'])}, "
                         "expected an object")
    for group, choice in (record.get("choices") or {}).items():
        if isinstance(choice, (list, tuple, Mapping)):
            raise ValueError(f"'choices.{group}' is {_kind(choice)}, expected a string")
    return record


def load_record(path: str | Path) -> dict[str, Any]:
    """Read one record (a ``result.json`` file or the directory holding it).

    Raises:
        RecordError: (a ValueError) naming the file: not valid JSON, or not shaped like a record (see
            :func:`check_record`).
        OSError: the file cannot be read (FileNotFoundError: there is none).
    """
    path = Path(path)
    if path.is_dir():
        path = path / RECORD_NAME
    try:
        record = read_json(path)
    except JSONFileError as e:
        raise RecordError(path, e.reason) from None
    return record_of(record, path)


def record_of(value: Any, path: str | Path) -> dict[str, Any]:
    """``value``, read from ``path`` (a file, or its place in a records archive), when it is shaped like a
    record (see :func:`check_record`).

    Raises:
        RecordError: naming ``path``: not shaped like a record.
    """
    try:
        return check_record(value)
    except ValueError as e:
        raise RecordError(path, f"malformed record: {e}") from None


def find_records(path: str | Path) -> list[Path]:
    """Every ``result.json`` below ``path`` (recursively, in natural order: job 2 before job 10);
    ``path`` itself when it is a file. Temporary ``.result.json.*.tmp`` files are never matched.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    return find_named(path, RECORD_NAME)


def find_named(path: str | Path, name: str, accept: Callable[[Path], bool] = Path.is_file) -> list[Path]:
    """Every file called ``name`` below the folder ``path`` (recursively, in natural order); ``path``
    itself when it is a file that ``accept`` takes.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    if path.is_file():
        return [path] if accept(path) else []
    return sorted((p for p in path.rglob(name) if p.is_file()), key=natural_key)


def natural_key(text: Any) -> list[Any]:
    """Sort key putting ``job2`` before ``job10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]
