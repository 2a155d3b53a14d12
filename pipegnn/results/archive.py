"""Records archives: a sweep's per-run JSON files (records, and the traces beside them) as one compact file,
``records.jsonl.gz``, which a clone carries instead of a file per run.

Each file is keyed by its path relative to the archive's folder (``records/3/result.json``), so that
[`pipegnn.results.load`][pipegnn.results.table.load] reads an archive as it reads the files it holds: the same
rows, each row's ``path`` the file's place were the archive unpacked
(``python -m pipegnn.results.archive --unpack ARCHIVE DEST`` puts it there, written as
[`write_record`][pipegnn.results.records.write_record] writes every record and trace, so byte for byte the
files the runs wrote).

The format, gzipped JSON lines:

- line 1, the header: ``{"format": "pipegnn.records", "version": 1, "files": N, "checksum": "crc32:..."}``,
  the CRC-32 ([`pipegnn.integrity`][pipegnn.integrity]) of the N lines after it: gzip's own CRC is made anew
  whenever the lines are compressed again, so an archive cut at a line, or edited, and compressed again is
  found by this one only;
- one line per file, in natural path order (job 2 before job 10): ``{"path": KEY, "json": VALUE}``, or
  ``{"path": KEY, "unreadable": WHY}`` for a file that was not valid JSON when packed (read as the file
  was: an ``unreadable`` row).

Same files, same bytes: compact separators, key order as in the files, gzip at level 9 with mtime 0 and
no file name (the bytes could change only with zlib's version).

Reading parses JSON only: nothing an archive holds can run code. It reads a regular file only (a FIFO
never makes it wait) and inflates it as a stream, twice (the checks, then the entries), holding one line
at a time: at most `MAX_LINE_BYTES` a line, `MAX_INFLATED_BYTES` in all, and no line past the
header's count of files (at most `MAX_FILES`), so that a small file that inflates to gigabytes is
refused early, never read into memory. A key must name one of a run's files
(`FILE_NAMES`) by a relative path of plain names below the archive's folder, at most `MAX_KEY_CHARS`
characters and `MAX_KEY_PARTS` names: no ``..``, no leading
``/``, no backslash, no control character (NUL included) or lone surrogate, and never a folder of another
key's path (``a/result.json`` and ``a/result.json/trace.json``). Any damage (a cut or corrupt gzip stream,
a bound passed, a line that is not JSON or not an entry, such a key, a wrong count or checksum) is one
[`ArchiveError`][pipegnn.results.archive.ArchiveError] naming the archive;
[`unpack`][pipegnn.results.archive.unpack] writes nothing from such an archive, nor any file that a link in
the destination would take outside it.
"""
from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable, Collection, Iterator, Mapping, Sequence

from pipegnn.atomic import atomic_file
from pipegnn.integrity import stream_checksum
from pipegnn.jsonfile import JSONFileError, parse_json
from pipegnn.results.records import (
    RECORD_NAME,
    find_named,
    find_records,
    is_entry,
    natural_key,
    open_regular,
    read_regular,
    write_record,
)

__all__ = ["ARCHIVE_NAME", "FILE_NAMES", "MAX_FILES", "MAX_INFLATED_BYTES", "MAX_KEY_CHARS", "MAX_KEY_PARTS",
           "MAX_LINE_BYTES", "ArchiveError",
           "Entry", "Packed", "entries", "find_archives", "is_archive", "pack", "read", "run_files", "unpack"]

#: A sweep's archive, in its results folder (``results/reference/<preset>/records.jsonl.gz``).
ARCHIVE_NAME = "records.jsonl.gz"
_SUFFIX = ".jsonl.gz"
_FORMAT, _VERSION = "pipegnn.records", 1
#: Fixed, so that packing the same files gives the same bytes.
_LEVEL = 9
#: The files an archive holds: a run's record and the stage timeline beside it
#: (``pipegnn.timeline.TRACE_NAME``, not imported here: it imports torch).
FILE_NAMES = (RECORD_NAME, "trace.json")
#: Bounds of what reading an archive inflates: the whole stream, and one line (one file; the largest of the
#: committed reference archives inflates to 35 MB, its longest line is 1.3 MB).
MAX_INFLATED_BYTES = 1 << 30
MAX_LINE_BYTES = 64 << 20
#: The most files an archive's header may count (a sweep of half a million runs, each with its trace).
MAX_FILES = 1 << 20
#: Bounds of a key (``records/<job path>/result.json``), checked before anything is built from its folders:
#: its characters, and its names (folders and file).
MAX_KEY_CHARS = 1024
MAX_KEY_PARTS = 32


class ArchiveError(JSONFileError):
    """An archive that cannot be used: not a whole gzip stream, not an archive, or a line damaged.
    ``str()`` names the archive (and the line); ``path`` and ``reason`` hold the two parts."""


@dataclass(frozen=True)
class Packed:
    """What an archive holds.

    Attributes:
        paths: every file's key, in the archive's order.
        files: the JSON value of each file asked for (all by default), by key.
        unreadable: the files that were not valid JSON when packed: key -> why.
    """
    paths: tuple[str, ...]
    files: dict[str, Any]
    unreadable: dict[str, str]


@dataclass(frozen=True)
class Entry:
    """One file of an archive: its key, its JSON value (None when it is unreadable), and why it was not
    valid JSON when packed (None when it was)."""
    path: str
    value: Any
    unreadable: str | None


def is_archive(path: str | Path) -> bool:
    """Whether ``path`` is named as an archive is (``*.jsonl.gz``)."""
    return Path(path).name.endswith(_SUFFIX)


def find_archives(path: str | Path) -> list[Path]:
    """Every ``records.jsonl.gz`` below the folder ``path`` (recursively, in natural order); ``path``
    itself when it is an archive; none for another file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    return find_named(path, ARCHIVE_NAME, is_archive)


def run_files(folder: str | Path, beside: Sequence[str] = (), under: str = "") -> dict[str, Path]:
    """Every ``result.json`` below ``folder`` and each file named in ``beside`` (``trace.json``) next to it,
    keyed by its path relative to ``folder`` below ``under`` (``records`` gives ``records/3/result.json``).
    Every entry of those names but a folder is one ([`is_entry`][pipegnn.results.records.is_entry]: a FIFO,
    a link to a device or to nothing), which [`pack`][pipegnn.results.archive.pack] packs as unreadable."""
    folder = Path(folder)
    files = {}
    for record in find_records(folder):
        for file in (record, *(record.parent / name for name in beside)):
            if is_entry(file):  # a FIFO or a link to a device too: packed as unreadable, so named
                files[(PurePosixPath(under) / file.relative_to(folder).as_posix()).as_posix()] = file
    return files


def _check_key(key: Any) -> str | None:
    """Why ``key`` cannot name a run's file below an archive's folder (None if it can): unpacking must
    never write outside its destination, nor anything but a run's files, and every reader must be able to
    name the file."""
    if not isinstance(key, str) or not key:
        return f"path {key!r} is not a file name"
    if len(key) > MAX_KEY_CHARS or key.count("/") >= MAX_KEY_PARTS:  # before any work on its folders
        return (f"path {key[:60]!r}... of {len(key):,} characters and {key.count('/') + 1:,} names is longer "
                f"than a run's file (at most {MAX_KEY_CHARS:,} characters, {MAX_KEY_PARTS} names)")
    if any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in key):
        return f"path {key!r} holds a character no file name may (NUL, a control character, a lone surrogate)"
    if key.startswith("/") or "\\" in key or any(p in ("", ".", "..") for p in key.split("/")):
        return f"path {key!r} is not a relative path below the archive's folder"
    if key.rsplit("/", 1)[-1] not in FILE_NAMES:
        return f"path {key!r} is none of a run's files ({' or '.join(FILE_NAMES)} below the archive's folder)"
    return None


def _folders(key: str) -> list[str]:
    """The folders of ``key``'s path: ``a/b/result.json`` -> ``a``, ``a/b``."""
    parts = key.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _order(key: str) -> tuple[list[Any], str]:
    """The archive's order of keys: natural (job 2 before job 10), ties by text."""
    return natural_key(key), key


def pack(archive: str | Path, files: Mapping[str, str | Path]) -> Path:
    """Write ``files`` (key -> the JSON file) as the archive ``archive``, atomically; a file that is not
    valid JSON, or cannot be read (not a regular file: a FIFO, a device; gone; larger than
    `MAX_LINE_BYTES`), is packed as unreadable, with why. Returns ``archive``.

    Raises:
        ValueError: a key is not one of a run's files by a relative path of plain names (see the module
            doc), or names a folder of another key.
        OSError: the archive cannot be written (naming it).
    """
    lines = []
    files_seen: set[str] = set()
    folders_seen: set[str] = set()
    for key in sorted(files, key=_order):
        if (problem := _check_key(key) or _clash(key, files_seen, folders_seen)) is not None:
            raise ValueError(f"{archive}: {problem}")
        try:
            entry = {"path": key, "json": _read_file(files[key])}
        except JSONFileError as e:
            entry = {"path": key, "unreadable": e.reason}
        except (OSError, ValueError) as e:  # not a regular file (a FIFO, a device), gone, too large
            entry = {"path": key, "unreadable": f"{type(e).__name__}: {e}"}
        lines.append(json.dumps(entry, separators=(",", ":")).encode() + b"\n")
    header = {"format": _FORMAT, "version": _VERSION, "files": len(lines), "checksum": stream_checksum(lines)}
    data = json.dumps(header, separators=(",", ":")).encode() + b"\n" + b"".join(lines)
    with atomic_file(archive, "wb") as f:
        f.write(gzip.compress(data, compresslevel=_LEVEL, mtime=0))
    return Path(archive)


def _read_file(path: str | Path) -> Any:
    """The JSON value of the regular file ``path`` of at most `MAX_LINE_BYTES` (a FIFO is never waited on,
    a device never read).

    Raises:
        JSONFileError: not valid UTF-8 JSON, or nested too deeply to parse.
        OSError: it cannot be read (NotRegularFileError: not a regular file).
        ValueError: it holds more than `MAX_LINE_BYTES`.
    """
    return parse_json(read_regular(path, MAX_LINE_BYTES), path)


def _parse(archive: Path, number: int, line: bytes) -> Any:
    """The JSON value of line ``number``; [`ArchiveError`][pipegnn.results.archive.ArchiveError] naming it
    when it is not JSON."""
    try:
        return json.loads(line)
    except RecursionError:
        raise ArchiveError(archive, f"line {number}: RecursionError: nested too deeply to parse") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ArchiveError(archive, f"line {number}: {type(e).__name__}: {e}") from None


def _clash(key: str, files: set[str], folders: set[str]) -> str | None:
    """Why ``key`` cannot be a file beside the ``files`` (keys) and ``folders`` (their folders) already
    seen, which it joins (None if it can): a file and a folder of one name cannot both be written."""
    if key in folders:
        return f"path {key!r} is also a folder of another path"
    clash = next((f for f in _folders(key) if f in files), None)
    if clash is not None:
        return f"path {key!r} puts a folder where the path {clash!r} is a file"
    files.add(key)
    folders.update(_folders(key))
    return None


def _lines(archive: Path, raw: BinaryIO) -> Iterator[bytes]:
    """The inflated lines of the open ``archive`` (``raw``) from its start, each with its newline (the
    last one may lack it), inflated as they are read, within `MAX_LINE_BYTES` and
    `MAX_INFLATED_BYTES`."""
    raw.seek(0)
    total = 0
    try:
        with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
            while line := stream.readline(MAX_LINE_BYTES + 1):
                total += len(line)
                if len(line) > MAX_LINE_BYTES:
                    raise ArchiveError(archive, f"a line inflates to more than {MAX_LINE_BYTES:,} bytes, "
                                                "more than any run's file: not read (a decompression bomb?)")
                if total > MAX_INFLATED_BYTES:
                    raise ArchiveError(archive, f"inflates to more than {MAX_INFLATED_BYTES:,} bytes, more "
                                                "than a sweep's records: not read (a decompression bomb?)")
                yield line
    except (EOFError, OSError, zlib.error) as e:  # cut short; not gzip (BadGzipFile) or a bad CRC; corrupt
        raise ArchiveError(archive, f"not a whole gzip stream ({type(e).__name__}: {e})") from None


def _checked(archive: Path, raw: BinaryIO) -> int:
    """The number of files in the open ``archive`` (``raw``), once the gzip stream, the bounds, the header,
    the count of lines and their checksum hold (one pass over the inflated stream)."""
    lines = _lines(archive, raw)
    header = _parse(archive, 1, next(lines, b""))
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise ArchiveError(archive, f"line 1 is not the header of a {_FORMAT} archive")
    if header.get("version") != _VERSION:
        raise ArchiveError(archive, f"version {header.get('version')!r}, this reader knows {_VERSION}")
    files = header.get("files")
    if isinstance(files, bool) or not isinstance(files, int) or not 0 <= files <= MAX_FILES:
        raise ArchiveError(archive, f"the header counts {files!r} files, expected a number from 0 to "
                                    f"{MAX_FILES:,}")
    count, whole = 0, True

    def counted() -> Iterator[bytes]:
        nonlocal count, whole
        for line in lines:
            whole = line.endswith(b"\n")
            count += whole
            if count > files:  # stop here: the lines after may be a bomb of short ones
                raise ArchiveError(archive, f"{count} lines or more after the header, which says {files!r}")
            yield line

    checksum, stored = stream_checksum(counted()), header.get("checksum")  # that of the lines, one by one
    if count != header.get("files") or not whole:
        raise ArchiveError(archive, f"{count} whole lines after the header, which says "
                                    f"{header.get('files')!r}")
    if checksum != stored:
        raise ArchiveError(archive, f"content checksum {checksum}, the header says {stored!r}: "
                                    "the archive was damaged after it was packed")
    return count


def entries(archive: str | Path) -> Iterator[Entry]:
    """Each file of ``archive``, in order, one at a time (a reader keeps what it needs). The whole archive
    is checked first (gzip stream, bounds, header, count, checksum: one pass over the inflated stream),
    each line as it comes (a second pass).

    Raises:
        ArchiveError: (a ValueError) naming the archive: the gzip stream is cut or corrupt, it inflates
            past `MAX_INFLATED_BYTES` or a line past `MAX_LINE_BYTES`, the header is not an
            archive's, the lines are not the header's count or checksum, or a line is not JSON, not an
            entry, or its key is not a run's file below the archive's folder (see the module doc) (its
            number named; the entries before it have come).
        OSError: the file cannot be read (FileNotFoundError: there is none; NotRegularFileError: it is a
            FIFO, a folder, a device).
    """
    archive = Path(archive)
    with open_regular(archive) as raw:
        _checked(archive, raw)
        lines = _lines(archive, raw)
        next(lines)  # the header
        previous = None
        files: set[str] = set()
        folders: set[str] = set()
        for number, line in zip(itertools.count(2), lines):
            entry = _parse(archive, number, line)
            problem = _check_key(entry.get("path")) if isinstance(entry, dict) else "not a JSON object"
            if problem is None and not (set(entry) == {"path", "json"} or (
                    set(entry) == {"path", "unreadable"} and isinstance(entry["unreadable"], str))):
                problem = "not an entry (path and json, or path and unreadable)"
            if problem is None and previous is not None and _order(entry["path"]) <= _order(previous):
                problem = f"path {entry['path']!r} out of order or again"  # so that no file is listed twice
            if problem is None:
                problem = _clash(entry["path"], files, folders)
            if problem is not None:
                raise ArchiveError(archive, f"line {number}: {problem}")
            previous = entry["path"]
            yield Entry(entry["path"], entry.get("json"), entry.get("unreadable"))


def read(archive: str | Path, keep: Callable[[str], bool] | Collection[str] | None = None) -> Packed:
    """What ``archive`` holds, every line checked (see [`entries`][pipegnn.results.archive.entries]); the
    values of the files ``keep`` accepts (a predicate on the key or a collection of keys; None: every file).

    Raises:
        ArchiveError: see [`entries`][pipegnn.results.archive.entries] (nothing is returned from a damaged
            archive).
        OSError: the file cannot be read (FileNotFoundError: there is none).
    """
    wanted = keep if keep is None or callable(keep) else set(keep).__contains__
    paths, files, unreadable = [], {}, {}
    for entry in entries(archive):
        paths.append(entry.path)
        if entry.unreadable is not None:
            unreadable[entry.path] = entry.unreadable
        elif wanted is None or wanted(entry.path):
            files[entry.path] = entry.value
    return Packed(tuple(paths), files, unreadable)


def unpack(archive: str | Path, dest: str | Path,
           keep: Callable[[str], bool] | Collection[str] | None = None) -> tuple[list[Path], dict[str, str]]:
    """Write the files of ``archive`` (those ``keep`` accepts, see [`read`][pipegnn.results.archive.read])
    below ``dest``, each at its key, as [`write_record`][pipegnn.results.records.write_record] writes it.
    Returns the files written and the ones that could not be (unreadable when packed: key -> why).

    Nothing is written until the whole archive has been read and checked (see
    [`entries`][pipegnn.results.archive.entries]), and each file it would write is below ``dest`` once links
    there are followed, and its names and path within what the file system there takes.

    Raises:
        ArchiveError: see [`read`][pipegnn.results.archive.read]; also a file that a link in ``dest`` would
            take outside it, one whose name or path is longer than the file system there takes, or a
            ``dest`` whose links loop (nothing written).
        OSError: a file cannot be written (naming it).
    """
    wanted = keep if keep is None or callable(keep) else set(keep).__contains__
    listed = read(archive, keep=())  # every line checked, no value kept
    try:
        root = Path(dest).resolve()
    except (OSError, RuntimeError) as e:  # a link loop (RuntimeError before Python 3.13)
        raise ArchiveError(archive, f"cannot write below {dest}: {type(e).__name__}: {e}: nothing written"
                           ) from None
    name_max, path_max = _name_limits(root)
    places = {}
    for key in listed.paths:
        if key in listed.unreadable or (wanted is not None and not wanted(key)):
            continue
        file = Path(dest, *PurePosixPath(key).parts)
        try:
            place = file.resolve()
        except (OSError, RuntimeError) as e:
            raise ArchiveError(archive, f"path {key!r} cannot be written below {dest} ({type(e).__name__}: "
                                        f"{e}): nothing written") from None
        if not place.is_relative_to(root):
            raise ArchiveError(archive, f"path {key!r} leads outside {dest} (through a link there, to "
                                        f"{place}): nothing written")
        long_name = next((n for n in PurePosixPath(key).parts if len(os.fsencode(n)) > name_max), None)
        if long_name is not None or len(os.fsencode(str(place))) >= path_max:
            what = (f"a name of {len(os.fsencode(long_name)):,} bytes, more than {name_max:,}" if long_name
                    else f"a path of {len(os.fsencode(str(place))):,} bytes there, {path_max:,} or more")
            raise ArchiveError(archive, f"path {key[:60]!r} cannot be written below {dest} ({what}, the most "
                                        "its file system takes): nothing written")
        places[key] = file
    written = []
    for entry in entries(archive):
        if entry.path in places:
            file = places[entry.path]
            written.append(write_record(file.parent, entry.value, file.name))
    return written, listed.unreadable


def _name_limits(folder: Path) -> tuple[int, int]:
    """The longest name and path (bytes) the file system of ``folder`` (or of its nearest existing parent)
    takes: NAME_MAX and PATH_MAX, 255 and 4096 where they cannot be asked."""
    limits = []
    for name, default in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        value = None
        for place in (folder, *folder.parents):
            try:
                value = os.pathconf(place, name)
                break
            except (OSError, ValueError):  # not there (yet), or not asked on this system
                continue
        limits.append(value if isinstance(value, int) and value > 0 else default)
    return limits[0], limits[1]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: 0 done, 1 some file was unreadable when packed (named on stderr), 2 a damaged
    archive or misuse."""
    parser = argparse.ArgumentParser(prog="python -m pipegnn.results.archive", description=(
        "Pack a results folder's per-run JSON files (result.json and the trace.json beside it) into one "
        f"{ARCHIVE_NAME}, or unpack one."))
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--pack", nargs="+", type=Path, metavar=("FOLDER", "ARCHIVE"),
                      help=f"pack FOLDER's files, keyed by their path below it, into ARCHIVE (default: "
                           f"FOLDER/{ARCHIVE_NAME}); the files stay")
    what.add_argument("--unpack", nargs=2, type=Path, metavar=("ARCHIVE", "DEST"),
                      help="write ARCHIVE's files below DEST")
    args = parser.parse_args(argv)
    try:
        if args.pack:
            if len(args.pack) > 2:
                parser.error("--pack takes FOLDER and at most one ARCHIVE")
            from pipegnn.timeline import TRACE_NAME  # imports torch: the command line only

            folder = args.pack[0]
            archive = args.pack[1] if len(args.pack) == 2 else folder / ARCHIVE_NAME
            files = run_files(folder, beside=(TRACE_NAME,))
            pack(archive, files)
            unreadable = read(archive, keep=()).unreadable
            print(f"packed {len(files)} files of {folder} into {archive} ({archive.stat().st_size:,} bytes)")
        else:
            written, unreadable = unpack(*args.unpack)
            print(f"wrote {len(written)} files of {args.unpack[0]} below {args.unpack[1]}")
    except (ArchiveError, OSError) as e:  # a damaged archive; one that cannot be read or written
        print(f"error: {e}", file=sys.stderr)
        return 2
    for key, reason in unreadable.items():
        print(f"unreadable when packed: {key}: {reason}", file=sys.stderr)
    return 1 if unreadable else 0


if __name__ == "__main__":
    sys.exit(main())
