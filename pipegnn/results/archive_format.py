"""The records archive's format: its file names, its bounds, the keys of its files, its error.

An archive (``records.jsonl.gz``) is gzipped JSON lines:

- line 1, the header: ``{"format": "pipegnn.records", "version": 1, "files": N, "checksum": "crc32:..."}``,
  the CRC-32 ([`pipegnn.integrity`][pipegnn.integrity]) of the N lines after it: gzip's own CRC is made anew
  whenever the lines are compressed again, so an archive cut at a line, or edited, and compressed again is
  found by this one only; and, in an archive split into parts, ``"part": I, "parts": P, "whole":
  "crc32:..."`` (below);
- one line per file, in natural path order (job 2 before job 10): ``{"path": KEY, "json": VALUE}``, or
  ``{"path": KEY, "unreadable": WHY}`` for a file that was not valid JSON when packed (read as the file
  was: an ``unreadable`` row).

A key must name one of a run's files (`FILE_NAMES`) by a relative path of plain names below the archive's
folder, at most `MAX_KEY_CHARS` characters and `MAX_KEY_PARTS` names: no ``..``, no leading ``/``, no
backslash, no control character (NUL included) or lone surrogate, and never a folder of another key's path
(``a/result.json`` and ``a/result.json/trace.json``).

An archive that would compress to more than `MAX_PART_BYTES` is split into parts, each an archive of its
own of whole runs (a record with its trace), the keys in order across them: ``records.jsonl.gz`` (part 1),
``records-2.jsonl.gz``, ... (`part_name`), so that no file of a sweep's results passes the 2 MiB that a
repository's checks flag (git hosts warn at larger files; a figure's records should travel with it). Each
part's header names its number, their count and ``whole``, the checksum of every part's lines in order;
a part is read only when every other part is beside it, with the same count and ``whole``, and no part
past the count: a part missing, left from an earlier pack, or from another pack is a damaged archive, never
a sweep read in part. Packing is [`archive`][pipegnn.results.archive]'s,
reading within the bounds [`archive_read`][pipegnn.results.archive_read]'s.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pipegnn.jsonfile import JSONFileError
from pipegnn.results.record_files import RECORD_NAME, find_named, natural_key

__all__ = ["ARCHIVE_NAME", "FILE_NAMES", "MAX_FILES", "MAX_INFLATED_BYTES", "MAX_KEY_CHARS", "MAX_KEY_PARTS",
           "MAX_LINE_BYTES", "MAX_PARTS", "MAX_PART_BYTES", "ArchiveError", "find_archives", "is_archive",
           "part_name"]

#: A sweep's archive, in its results folder (``results/reference/<preset>/records.jsonl.gz``).
ARCHIVE_NAME = "records.jsonl.gz"
_SUFFIX = ".jsonl.gz"
#: The names of a sweep's archive's parts: ``records.jsonl.gz``, ``records-2.jsonl.gz``, ...
_PARTS_OF_ARCHIVE = re.compile(r"records(-([2-9]|[1-9][0-9]+))?\.jsonl\.gz")
_FORMAT, _VERSION = "pipegnn.records", 1
#: The files an archive holds: a run's record and the stage timeline beside it
#: (``pipegnn.timeline.TRACE_NAME``, not imported here: it imports torch).
FILE_NAMES = (RECORD_NAME, "trace.json")
#: Bounds of what reading an archive inflates: the whole stream, and one line (one file; the largest of the
#: committed reference archive files inflates to 12 MB, its longest line is 0.7 MB; parsing a 64 MiB line
#: took 1.7 GB).
MAX_INFLATED_BYTES = 256 << 20
MAX_LINE_BYTES = 8 << 20
#: The most files an archive's header may count (a sweep of 32,768 runs, each with its trace; the committed
#: reference archives hold at most a few hundred).
MAX_FILES = 1 << 16
#: Bounds of a key (``records/<job path>/result.json``), checked before anything is built from its folders:
#: its characters, and its names (folders and file).
MAX_KEY_CHARS = 1024
MAX_KEY_PARTS = 32
#: The most bytes one file of an archive takes when a run's files allow (a larger archive is split).
MAX_PART_BYTES = 2 << 20
#: The most parts a header may count (512 MiB of compressed records; each part's header is read with every
#: other's: 4,096 parts took minutes).
MAX_PARTS = 256


class ArchiveError(JSONFileError):
    """An archive that cannot be used: not a whole gzip stream, not an archive, or a line damaged.
    ``str()`` names the archive (and the line); ``path`` and ``reason`` hold the two parts."""


def is_archive(path: str | Path) -> bool:
    """Whether ``path`` is named as an archive is (``*.jsonl.gz``)."""
    return Path(path).name.endswith(_SUFFIX)


def find_archives(path: str | Path) -> list[Path]:
    """Every ``records.jsonl.gz`` below the folder ``path``, and every part of a split one
    (``records-2.jsonl.gz``, ...; recursively, in natural order); ``path`` itself when it is an archive;
    none for another file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    return find_named(path, _PARTS_OF_ARCHIVE.fullmatch, is_archive)


def part_name(archive: str | Path, part: int) -> Path:
    """The file of part ``part`` (from 1) of the archive whose first part is ``archive`` (``*.jsonl.gz``):
    ``records.jsonl.gz`` itself, then ``records-2.jsonl.gz``, ..."""
    archive = Path(archive)
    return archive if part == 1 else archive.with_name(f"{archive.name[:-len(_SUFFIX)]}-{part}{_SUFFIX}")


def _first_part(archive: Path, part: int) -> Path | None:
    """The first part of the archive of which ``archive`` is part ``part``; None when its name is not
    that part's."""
    if part == 1:
        return archive
    suffix = f"-{part}{_SUFFIX}"
    if not archive.name.endswith(suffix) or archive.name == suffix:
        return None
    return archive.with_name(archive.name[:-len(suffix)] + _SUFFIX)


def _part_problem(header: dict[str, Any]) -> str | None:
    """Why the part fields of an archive's ``header`` are not a part's (None if they are, or if there are
    none: an archive of one part)."""
    fields = {k: header[k] for k in ("part", "parts", "whole") if k in header}
    if not fields:
        return None
    part, parts = fields.get("part"), fields.get("parts")
    if (type(part) is not int or type(parts) is not int or not isinstance(fields.get("whole"), str)
            or not 1 <= part <= parts <= MAX_PARTS):
        return (f"the header's part fields {fields} are not a part of a split archive (part from 1 to parts, "
                f"at most {MAX_PARTS:,}, and the whole's checksum)")
    return None


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
