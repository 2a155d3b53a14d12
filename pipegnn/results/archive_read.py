"""Reading a records archive within bounds, and unpacking it.

Reading parses JSON only: nothing an archive holds can run code. It reads a regular file only (a FIFO
never makes it wait) and inflates it as a stream, twice (the checks, then the entries), holding one line
at a time: at most `MAX_LINE_BYTES` a line, `MAX_INFLATED_BYTES` in all, and no line past the
header's count of files (at most `MAX_FILES`), so that a small file that inflates to gigabytes is
refused early, never read into memory. An archive named by its first part is every part: the bounds hold
over all of them together, and its keys are in order, never twice, never a folder of another, across the
parts. Every key is checked as [`archive_format`][pipegnn.results.archive_format] says. Any damage (a cut
or corrupt gzip stream, a bound passed, a line that is not JSON or not an entry, such a key, a wrong count
or checksum) is one [`ArchiveError`][pipegnn.results.archive_format.ArchiveError] naming the archive (the
part); [`unpack`][pipegnn.results.archive_read.unpack] writes nothing from such an archive, nor any file
that a link in the destination would take outside it, and writes each file indented as a run does only
while that stays within `UNPACKED_GROWTH` times its compact size (else compact).
"""
from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import zlib
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable, Collection, Generator, Iterator

from pipegnn.integrity import stream_checksum
from pipegnn.jsonfile import open_regular, write_json
from pipegnn.results.archive_format import (
    _FORMAT,
    _VERSION,
    MAX_FILES,
    MAX_INFLATED_BYTES,
    MAX_LINE_BYTES,
    ArchiveError,
    _check_key,
    _clash,
    _first_part,
    _order,
    _part_problem,
    find_archives,
    part_name,
)
from pipegnn.results.record_files import is_entry

__all__ = ["Entry", "Packed", "archives_of", "entries", "parts", "read", "unpack"]

#: How many times its compact JSON a file unpacks to, at most: indented by 2 as a run writes it (runs'
#: records come to 1.3-1.5x), else compact (a value nested 64 deep indents to 65x: an archive bounded to
#: 256 MiB inflated would have unpacked to gigabytes).
UNPACKED_GROWTH = 2


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


def _parse(archive: Path, number: int, line: bytes) -> Any:
    """The JSON value of line ``number``; [`ArchiveError`][pipegnn.results.archive_format.ArchiveError]
    naming it when it is not JSON."""
    try:
        return json.loads(line)
    except RecursionError:
        raise ArchiveError(archive, f"line {number}: RecursionError: nested too deeply to parse") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ArchiveError(archive, f"line {number}: {type(e).__name__}: {e}") from None


@dataclass
class _Inflated:
    """The bytes inflated so far from the parts of one archive, read in one pass (the bound is the whole
    archive's, not each part's: 12 parts of 2.5 MB in all inflated to 2.6 GB, each within it)."""
    total: int = 0


def _lines(archive: Path, raw: BinaryIO, inflated: _Inflated | None = None) -> Generator[bytes, None, None]:
    """The inflated lines of the open ``archive`` (``raw``) from its start, each with its newline (the
    last one may lack it), inflated as they are read, within `MAX_LINE_BYTES` and
    `MAX_INFLATED_BYTES` (with ``inflated``: counted with the archive's other parts read before)."""
    raw.seek(0)
    inflated = _Inflated() if inflated is None else inflated
    try:
        with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
            while line := stream.readline(MAX_LINE_BYTES + 1):
                inflated.total += len(line)
                if len(line) > MAX_LINE_BYTES:
                    raise ArchiveError(archive, f"a line inflates to more than {MAX_LINE_BYTES:,} bytes, "
                                                "more than any run's file: not read (a decompression bomb?)")
                if inflated.total > MAX_INFLATED_BYTES:
                    raise ArchiveError(archive, f"the archive (all its parts) inflates to more than "
                                                f"{MAX_INFLATED_BYTES:,} bytes, more than a sweep's records: "
                                                "not read (a decompression bomb?)")
                yield line
    except (EOFError, OSError, zlib.error) as e:  # cut short; not gzip (BadGzipFile) or a bad CRC; corrupt
        raise ArchiveError(archive, f"not a whole gzip stream ({type(e).__name__}: {e})") from None


def _header(archive: Path, lines: Iterator[bytes]) -> dict[str, Any]:
    """The header of ``archive``, its first line of ``lines``, once its format, version, count of files
    and part fields are an archive's."""
    header = _parse(archive, 1, next(lines, b""))
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise ArchiveError(archive, f"line 1 is not the header of a {_FORMAT} archive")
    if header.get("version") != _VERSION:
        raise ArchiveError(archive, f"version {header.get('version')!r}, this reader knows {_VERSION}")
    files = header.get("files")
    if isinstance(files, bool) or not isinstance(files, int) or not 0 <= files <= MAX_FILES:
        raise ArchiveError(archive, f"the header counts {files!r} files, expected a number from 0 to "
                                    f"{MAX_FILES:,}")
    if (problem := _part_problem(header)) is not None:
        raise ArchiveError(archive, problem)
    return header


def _part_header(file: Path) -> dict[str, Any]:
    """The header of the archive ``file`` (a part beside the one being read): its first line alone."""
    with open_regular(file) as raw:
        lines = _lines(file, raw)
        try:
            return _header(file, lines)
        finally:
            lines.close()


def _check_parts(archive: Path, header: dict[str, Any]) -> None:
    """That every part of the split archive of which ``archive`` (with ``header``) is one is beside it,
    each with the same count of parts and the same ``whole``, and that no part follows the last."""
    if "parts" not in header:  # read alone: a part 2 beside it would be listed with it, and not read
        if is_entry(after := part_name(archive, 2)):
            raise ArchiveError(archive, f"{after.name} is beside it, but the archive is not split: a part "
                                        "left from an earlier pack, or of another archive; not read")
        return
    part, count = header["part"], header["parts"]
    files = header["files"]
    first = _first_part(archive, part)
    if first is None:
        raise ArchiveError(archive, f"part {part} of {count} of a split archive, named otherwise than that "
                                    f"part (its name ends in -{part}.jsonl.gz)")
    after = part_name(first, count + 1)
    if is_entry(after):
        raise ArchiveError(archive, f"{after.name} is beside it, but the archive has {count} parts: a part "
                                    "left from an earlier pack, or of another archive; not read")
    for other in range(1, count + 1):
        file = part_name(first, other)
        if other == part:
            continue
        if not is_entry(file):
            raise ArchiveError(archive, f"part {part} of {count}: part {other} ({file.name}) is not beside "
                                        "it; a split archive is read whole or not at all")
        try:
            theirs = _part_header(file)
        except (ArchiveError, OSError) as e:
            raise ArchiveError(archive, f"part {part} of {count}: part {other} cannot be read ({e})"
                               ) from None
        if [theirs.get(k) for k in ("part", "parts", "whole")] != [other, count, header["whole"]]:
            raise ArchiveError(archive, f"part {part} of {count}: {file.name} is not part {other} of the "
                                        "same archive (its part fields differ): parts of two packs; not read")
        files += theirs["files"]
    if files > MAX_FILES:
        raise ArchiveError(archive, f"part {part} of {count}: the parts' headers count {files:,} files in "
                                    f"all, more than {MAX_FILES:,}: not read")


def _checked(archive: Path, raw: BinaryIO, inflated: _Inflated) -> int:
    """The number of files in the open ``archive`` (``raw``), once the header, the gzip stream, the bounds
    (counted in ``inflated`` with the parts read before), the count of lines and their checksum hold (one
    pass over the inflated stream; the parts beside it were checked first: `_read_parts`)."""
    lines = _lines(archive, raw, inflated)
    header = _header(archive, lines)
    files = header["files"]
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


def parts(archive: str | Path) -> list[Path]:
    """The files of the archive whose first part is ``archive``, in order: ``archive`` alone when it is not
    split (read from its header: its first line alone; each part is checked when it is read).

    Raises:
        ArchiveError: the header is not an archive's, or ``archive`` is a later part.
        OSError: the file cannot be read.
    """
    archive = Path(archive)
    header = _part_header(archive)
    if header.get("part", 1) != 1:
        raise ArchiveError(archive, f"part {header['part']} of {header['parts']}: the archive is named by "
                                    f"its first part, {_first_part(archive, header['part']) or 'part 1'}")
    return [part_name(archive, part) for part in range(1, header.get("parts", 1) + 1)]


def archives_of(root: str | Path) -> list[Path]:
    """The archives below the folder ``root``, each named once (by its first part, which
    [`entries`][pipegnn.results.archive_read.entries] reads whole: a later part is listed only where no
    first part of its name is beside it, to be named as damaged); ``root`` itself when it is an archive."""
    found = find_archives(root)
    listed = set(found)
    return [file for file in found if not _later_part(file, listed)]


def _later_part(file: Path, listed: set[Path]) -> bool:
    """Whether ``file`` is named as a later part of an archive whose first part is in ``listed``."""
    number = re.fullmatch(r".*-([0-9]+)\.jsonl\.gz", file.name)
    part = int(number.group(1)) if number is not None else 1
    return part > 1 and _first_part(file, part) in listed


def _read_parts(archive: Path) -> list[Path]:
    """The files read for ``archive``: every part of a split archive named by its first part (see
    [`parts`][pipegnn.results.archive_read.parts]), or a later part alone; once every other part is beside
    it, with the same count and ``whole``, and their headers' counts of files within `MAX_FILES` in all
    (`_check_parts`: before any part's lines are read)."""
    header = _part_header(archive)
    _check_parts(archive, header)
    return parts(archive) if header.get("part", 1) == 1 else [archive]


def entries(archive: str | Path) -> Iterator[Entry]:
    """Each file of ``archive``, in order, one at a time (a reader keeps what it needs): of every part when
    it is the first part of a split archive, of that part alone when it is a later one. The whole archive
    is checked first (every part's gzip stream, header, count, checksum, and the bounds over all of them:
    one pass over the inflated streams), each line as it comes (a second pass), the order of keys and the
    clash of a file with a folder across the parts.

    Raises:
        ArchiveError: (a ValueError) naming the archive: the gzip stream is cut or corrupt, it inflates
            past `MAX_INFLATED_BYTES` or a line past `MAX_LINE_BYTES`, the header is not an
            archive's, the lines are not the header's count or checksum, or a line is not JSON, not an
            entry, or its key is out of order, again, a folder of another key, or not a run's file below
            the archive's folder (see
            [`archive_format`][pipegnn.results.archive_format]) (its number named; the entries before it
            have come).
        OSError: the file cannot be read (FileNotFoundError: there is none; NotRegularFileError: it is a
            FIFO, a folder, a device).
    """
    archive = Path(archive)
    with ExitStack() as opened:
        # each part opened once: the file checked is the file read
        files = [(part, opened.enter_context(open_regular(part))) for part in _read_parts(archive)]
        inflated = _Inflated()
        for part, raw in files:
            _checked(part, raw, inflated)
        previous = None
        keys: set[str] = set()
        folders: set[str] = set()
        for part, raw in files:
            lines = _lines(part, raw)
            next(lines)  # the header
            for number, line in zip(itertools.count(2), lines):
                entry = _parse(part, number, line)
                problem = _check_key(entry.get("path")) if isinstance(entry, dict) else "not a JSON object"
                if problem is None and not (set(entry) == {"path", "json"} or (
                        set(entry) == {"path", "unreadable"} and isinstance(entry["unreadable"], str))):
                    problem = "not an entry (path and json, or path and unreadable)"
                if problem is None and previous is not None and _order(entry["path"]) <= _order(previous):
                    problem = f"path {entry['path']!r} out of order or again"  # no file listed twice
                if problem is None:
                    problem = _clash(entry["path"], keys, folders)
                if problem is not None:
                    raise ArchiveError(part, f"line {number}: {problem}")
                previous = entry["path"]
                yield Entry(entry["path"], entry.get("json"), entry.get("unreadable"))


def read(archive: str | Path, keep: Callable[[str], bool] | Collection[str] | None = None) -> Packed:
    """What ``archive`` holds, every line checked (see [`entries`][pipegnn.results.archive_read.entries]); the
    values of the files ``keep`` accepts (a predicate on the key or a collection of keys; None: every file).

    Raises:
        ArchiveError: see [`entries`][pipegnn.results.archive_read.entries] (nothing is returned from a
            damaged archive).
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
    """Write the files of ``archive`` (of every part when it is the first part of a split archive, a later
    part's alone; those ``keep`` accepts, see [`read`][pipegnn.results.archive_read.read]) below ``dest``,
    each at its key, as a run writes it ([`write_json`][pipegnn.jsonfile.write_json]).
    Returns the files written and the ones that could not be (unreadable when packed: key -> why).

    Nothing is written until every part has been read and checked (see
    [`entries`][pipegnn.results.archive_read.entries]), and each file it would write is below ``dest`` once
    links there are followed, and its names and path within what the file system there takes.

    Raises:
        ArchiveError: see [`read`][pipegnn.results.archive_read.read]; also a file that a link in
            ``dest`` would take outside it, one whose name or path is longer than the file system there
            takes, or a ``dest`` whose links loop (nothing written).
        OSError: a file cannot be written (naming it).
    """
    wanted = keep if keep is None or callable(keep) else set(keep).__contains__
    archive = Path(archive)
    listed = read(archive, keep=())  # every line of every part checked, no value kept
    try:
        root = Path(dest).resolve()
    except (OSError, RuntimeError) as e:  # a link loop (RuntimeError before Python 3.13)
        raise ArchiveError(archive, f"cannot write below {dest}: {type(e).__name__}: {e}: nothing written"
                           ) from None
    name_max, path_max = _name_limits(root)
    places = {key: _place(archive, dest, root, key, name_max, path_max) for key in listed.paths
              if key not in listed.unreadable and (wanted is None or wanted(key))}
    written = []
    for entry in entries(archive):
        if entry.path in places:
            compact = len(json.dumps(entry.value, separators=(",", ":"), default=str))
            written.append(write_json(places[entry.path], entry.value, most=UNPACKED_GROWTH * compact + 4096))
    return written, dict(listed.unreadable)


def _place(archive: Path, dest: str | Path, root: Path, key: str, name_max: int, path_max: int) -> Path:
    """Where the file ``key`` of ``archive`` is written below ``dest`` (``root``, resolved).

    Raises:
        ArchiveError: a link there would take it outside ``dest``, or its names or path are longer than
            the file system there takes (``name_max``, ``path_max``).
    """
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
    return file


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
