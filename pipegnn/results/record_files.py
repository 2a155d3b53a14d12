"""Result records on disk: one ``result.json`` per run, found, read and checked (written:
[`pipegnn.runs.record_writes`][pipegnn.runs.record_writes]).

What a record holds, its versions and its checks: [`RunRecord`][pipegnn.run_record.RunRecord].

This module knows files only; [`pipegnn.results.table`][pipegnn.results.table] aggregates records into tables
and [`pipegnn.results.sweep`][pipegnn.results.sweep] matches them with a sweep's jobs.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable

from pipegnn.completion import completion_problem
from pipegnn.folder_walk import walk
from pipegnn.jsonfile import JSONFileError, read_regular
from pipegnn.run_record import RECORD_NAME, RecordFormatError, RunRecord

__all__ = ["MAX_RECORD_BYTES", "RECORD_NAME", "RecordError", "check_record", "distinct", "find_records",
           "identities", "is_entry", "load_record", "natural_key", "place_of", "record_of"]

#: The largest record file a reader reads (a long run's is some hundreds of KiB; an archive's line, which
#: holds one, has the same bound): a larger one is unreadable, never loaded.
MAX_RECORD_BYTES = 8 << 20


class RecordError(JSONFileError):
    """A record file that cannot be used: not valid JSON (nesting too deep included), not shaped like
    a record, or of a newer version than this code reads.

    ``str()`` names the file; ``path`` and ``reason`` hold the two parts."""


def check_record(record: Any) -> RunRecord:
    """``record`` (a record's JSON value, of any version) as a [`RunRecord`][pipegnn.run_record.RunRecord],
    else [`RecordFormatError`][pipegnn.run_record.RecordFormatError] (a ValueError) naming the first problem:
    not a JSON object, a key that is no field of a record, a value of the wrong type (``status`` one of the
    statuses, ``error`` and ``traceback`` strings or null, each section an object, ``epochs`` and
    ``pipeline.stages`` arrays of objects, ``choices`` values scalars), a newer version than this code reads,
    or a ``completed`` record without what a completed run writes
    ([`completion_problem`][pipegnn.completion.completion_problem]: no epoch, or an accuracy absent or no
    number from 0 to 1). A version-1 record may lack sections (see
    [`migrate`][pipegnn.run_record.migrate])."""
    record = RunRecord.from_dict(record)
    problem = completion_problem(record)
    if problem is not None:
        raise RecordFormatError(problem, "status")
    return record


def load_record(path: str | Path) -> RunRecord:
    """Read one record (a ``result.json`` file or the directory holding it), migrated to the current
    version ([`from_dict`][pipegnn.run_record.RunRecord.from_dict]).

    Only a regular file is read ([`open_regular`][pipegnn.jsonfile.open_regular]: a FIFO in its place
    never makes the reader wait).

    Raises:
        RecordError: (a ValueError) naming the file: not valid JSON, not shaped like a record (see
            [`check_record`][pipegnn.results.record_files.check_record]), or of a newer version than this code
            reads.
        OSError: the file cannot be read (FileNotFoundError: there is none; NotRegularFileError: it is a
            FIFO, a folder, a device).
    """
    path = Path(path)
    if path.is_dir():
        path = path / RECORD_NAME
    try:
        data = read_regular(path, MAX_RECORD_BYTES)
    except ValueError as e:  # larger than any record
        raise RecordError(path, str(e)) from None
    try:
        record = json.loads(data)
    except RecursionError:  # as pipegnn.jsonfile.read_json words it
        raise RecordError(path, "RecursionError: nested too deeply to parse") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise RecordError(path, f"{type(e).__name__}: {e}") from None
    return record_of(record, path)


def record_of(value: Any, path: str | Path) -> RunRecord:
    """``value``, read from ``path`` (a file, or its place in a records archive), as a record (see
    [`check_record`][pipegnn.results.record_files.check_record]): every record file and archive line is read
    through here, so a ``completed`` record counts as completed only when its fields say so.

    Raises:
        RecordError: naming ``path``: not shaped like a record, of a newer version, or ``completed``
            without what a completed run writes.
    """
    try:
        return check_record(value)
    except RecordFormatError as e:
        raise RecordError(path, e.reason) from None


def find_records(path: str | Path) -> list[Path]:
    """Every ``result.json`` below ``path`` (recursively, in natural order: job 2 before job 10);
    ``path`` itself when it is a file. Below a folder, every entry so named but a folder
    ([`is_entry`][pipegnn.results.record_files.is_entry]: a FIFO or a link loop too, which a reader names as
    unreadable). Temporary ``.result.json.*.tmp`` files are never matched.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    return find_named(path, RECORD_NAME)


def find_named(path: str | Path, name: str | Callable[[str], Any],
               accept: Callable[[Path], bool] = Path.is_file) -> list[Path]:
    """Every entry called ``name`` (or whose name the predicate ``name`` takes) below the folder ``path``
    that is no folder (recursively, in natural order; see
    [`is_entry`][pipegnn.results.record_files.is_entry]); ``path`` itself when it is a file that ``accept``
    takes.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FolderTooDeep: its folders nest past `pipegnn.folder_walk.MAX_DEPTH`.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    if path.is_file():
        return [path] if accept(path) else []
    # a walk, not rglob: rglob passes over a link to nothing or a link loop of that name (it asks exists());
    # links to folders are not followed, as rglob does not
    named = name.__eq__ if isinstance(name, str) else name
    found = (Path(folder, file) for folder, _, files in walk(path) for file in files if named(file))
    return sorted(found, key=natural_key)


def is_entry(path: str | Path) -> bool:
    """Whether ``path`` is there as anything but a folder: a regular file, and also a FIFO, a device, a
    link to nothing or a link loop, which a reader then names as unreadable (a file in a record's place
    that cannot be read is never no record)."""
    return os.path.lexists(path) and not Path(path).is_dir()


def place_of(path: str | Path) -> Path:
    """``path`` with its links followed (``Path.resolve``), or made absolute as it is
    when they cannot be (a link loop: RuntimeError or OSError), so that a reader can name it."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def identities(path: str | Path) -> set[Any]:
    """What makes ``path`` the file it is: its place (links followed,
    [`place_of`][pipegnn.results.record_files.place_of]) and, for a file that is there, its device and
    inode (a hard link is the file it links; a FIFO is not opened). Two names of one file share one."""
    keys: set[Any] = {place_of(path)}
    try:
        stat = Path(path).stat()
        keys.add((stat.st_dev, stat.st_ino))
    except (OSError, RuntimeError):  # a link to nothing or a loop: no file to be
        pass
    return keys


def distinct(paths: Iterable[Path]) -> list[Path]:
    """``paths`` with each file (or folder) once, by its first name (see
    [`identities`][pipegnn.results.record_files.identities]): 2,000 hard links to one record were 2,000
    records to read."""
    seen: set[Any] = set()
    kept = []
    for path in paths:
        keys = identities(path)
        if not keys & seen:
            kept.append(path)
        seen |= keys
    return kept


def natural_key(text: Any) -> list[Any]:
    """Sort key putting ``job2`` before ``job10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]
