"""Records archives: a sweep's per-run JSON files (records, and the traces beside them) as one compact file,
``records.jsonl.gz``, which a clone carries instead of a file per run.

Each file is keyed by its path relative to the archive's folder (``records/3/result.json``), so that
[`pipegnn.results.load`][pipegnn.results.table.load] reads an archive as it reads the files it holds: the same
rows, each row's ``path`` the file's place were the archive unpacked
(``python -m pipegnn.results.archive --unpack ARCHIVE DEST`` puts it there, written as
[`write_json`][pipegnn.jsonfile.write_json] writes every record and trace, so byte for byte the
files the runs wrote, but for what `_compact_epochs` drops).

This module packs ([`pack`][pipegnn.results.archive.pack]) and is the command line; the format, its bounds and
its keys are [`archive_format`][pipegnn.results.archive_format]'s, reading and unpacking within those bounds
[`archive_read`][pipegnn.results.archive_read]'s. Every public name of the three is used through this module
(``archive.read``, ``archive.unpack``, ``archive.ArchiveError``, ...).

A record's per-epoch entries (its ``epochs``) fill most of it, and are packed compact: every float
rounded to `EPOCH_DECIMALS` decimals (a microsecond of a time, 1e-6 of an accuracy or a loss; the further
digits are timing noise and float32 rounding, and would double the archive), and each stage of an epoch's
``pipeline.stages`` with its `EPOCH_STAGE_KEYS` alone (its busy time; the forward, backward, recompute and
communication parts of every epoch were a quarter of the archive; the record's ``pipeline`` keeps their
medians, and its trace a step's). Everything else is packed as the file holds it, and compacting is
idempotent, so unpacking and packing again gives the same archive.

Same files, same bytes: compact separators, key order as in the files, gzip at level 9 with mtime 0 and
no file name (the bytes could change only with zlib's version). An archive that compresses to more than
`MAX_PART_BYTES` is written as the fewest parts of whole runs, split where the inflated lines balance, that
each compress to at most that ([`archive_format`][pipegnn.results.archive_format]; a run's files larger than
that alone make a larger part).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence

from pipegnn.atomic import atomic_file
from pipegnn.integrity import stream_checksum
from pipegnn.jsonfile import JSONFileError, parse_json, read_regular
from pipegnn.results.archive_format import (
    _FORMAT,
    _VERSION,
    ARCHIVE_NAME,
    FILE_NAMES,
    MAX_FILES,
    MAX_INFLATED_BYTES,
    MAX_KEY_CHARS,
    MAX_KEY_PARTS,
    MAX_LINE_BYTES,
    MAX_PART_BYTES,
    MAX_PARTS,
    ArchiveError,
    _check_key,
    _clash,
    _order,
    find_archives,
    is_archive,
    part_name,
)
from pipegnn.results.archive_read import Entry, Packed, archives_of, entries, parts, read, unpack
from pipegnn.results.record_files import RECORD_NAME, find_records, is_entry

__all__ = ["ARCHIVE_NAME", "EPOCH_DECIMALS", "EPOCH_STAGE_KEYS", "FILE_NAMES", "MAX_FILES",
           "MAX_INFLATED_BYTES", "MAX_KEY_CHARS", "MAX_KEY_PARTS", "MAX_LINE_BYTES", "MAX_PARTS",
           "MAX_PART_BYTES", "ArchiveError", "Entry", "Packed", "archives_of", "entries", "find_archives",
           "is_archive",
           "pack", "part_name", "parts", "read", "run_files", "unpack"]

#: Fixed, so that packing the same files gives the same bytes.
_LEVEL = 9
#: Decimals a float of a record's per-epoch entries keeps in an archive.
EPOCH_DECIMALS = 6
#: The keys each stage of a per-epoch ``pipeline.stages`` keeps in an archive (what the trackers log of it).
EPOCH_STAGE_KEYS = ("busy_s",)


def run_files(folder: str | Path, beside: Sequence[str] = (), under: str = "") -> dict[str, Path]:
    """Every ``result.json`` below ``folder`` and each file named in ``beside`` (``trace.json``) next to it,
    keyed by its path relative to ``folder`` below ``under`` (``records`` gives ``records/3/result.json``).
    Every entry of those names but a folder is one ([`is_entry`][pipegnn.results.record_files.is_entry]: a
    FIFO, a link to a device or to nothing), which [`pack`][pipegnn.results.archive.pack] packs as
    unreadable."""
    folder = Path(folder)
    files = {}
    for record in find_records(folder):
        for file in (record, *(record.parent / name for name in beside)):
            if is_entry(file):  # a FIFO or a link to a device too: packed as unreadable, so named
                files[(PurePosixPath(under) / file.relative_to(folder).as_posix()).as_posix()] = file
    return files


def pack(archive: str | Path, files: Mapping[str, str | Path], part_bytes: int = MAX_PART_BYTES) -> Path:
    """Write ``files`` (key -> the JSON file) as the archive ``archive``, each file atomically, with a
    record's per-epoch entries compacted (`_compact_epochs`); a file that is not valid JSON, or cannot be
    read (not a regular file: a FIFO, a device; gone; larger than `MAX_LINE_BYTES`), is packed as
    unreadable, with why. Split into parts of at most ``part_bytes`` where it compresses to more
    ([`parts`][pipegnn.results.archive_read.parts] lists them); the parts of an earlier pack past the last
    are removed. Returns ``archive`` (its first part).

    Raises:
        ValueError: ``archive`` is not named ``*.jsonl.gz`` (what readers take for an archive, and what its
            parts' names are made from), or a key is not one of a run's files by a relative path of plain
            names (see [`archive_format`][pipegnn.results.archive_format]), or names a folder of another key,
            or the files are more than `MAX_FILES` or inflate past `MAX_INFLATED_BYTES` (nothing written).
        OSError: the archive cannot be written (naming it).
    """
    if not is_archive(archive):
        raise ValueError(f"{archive}: an archive's name ends in .jsonl.gz (readers take no other for one)")
    lines = []
    files_seen: set[str] = set()
    folders_seen: set[str] = set()
    for key in sorted(files, key=_order):
        if (problem := _check_key(key) or _clash(key, files_seen, folders_seen)) is not None:
            raise ValueError(f"{archive}: {problem}")
        try:
            value = _read_file(files[key])
            if PurePosixPath(key).name == RECORD_NAME:
                value = _compact_epochs(value)
            entry = {"path": key, "json": value}
        except JSONFileError as e:
            entry = {"path": key, "unreadable": e.reason}
        except (OSError, ValueError) as e:  # not a regular file (a FIFO, a device), gone, too large
            entry = {"path": key, "unreadable": f"{type(e).__name__}: {e}"}
        lines.append(json.dumps(entry, separators=(",", ":")).encode() + b"\n")
    inflated = sum(map(len, lines))
    if len(lines) > MAX_FILES or inflated > MAX_INFLATED_BYTES:  # more than any reader takes: not written
        raise ValueError(f"{archive}: {len(lines):,} files of {inflated:,} bytes, more than an archive holds "
                         f"({MAX_FILES:,} files, {MAX_INFLATED_BYTES:,} bytes inflated, in all its parts)")
    runs = [PurePosixPath(key).parent for key in sorted(files, key=_order)]
    split = _split(lines, runs, part_bytes)
    for number, data in enumerate(split, 1):
        with atomic_file(part_name(archive, number), "wb") as f:
            f.write(data)
    number = len(split) + 1
    while is_entry(stale := part_name(archive, number)):  # an earlier pack's parts past the last
        stale.unlink()
        number += 1
    return Path(archive)


def _compressed(lines: Sequence[bytes], fields: Mapping[str, Any] | None = None) -> bytes:
    """The archive of ``lines`` (its files' lines), with ``fields`` added to its header (a part's)."""
    header = {"format": _FORMAT, "version": _VERSION, "files": len(lines), "checksum": stream_checksum(lines),
              **(fields or {})}
    data = json.dumps(header, separators=(",", ":")).encode() + b"\n" + b"".join(lines)
    return gzip.compress(data, compresslevel=_LEVEL, mtime=0)


def _split(lines: list[bytes], runs: list[PurePosixPath], part_bytes: int) -> list[bytes]:
    """The archive of ``lines`` when it compresses to at most ``part_bytes``; else its parts: the fewest
    that each compress to at most that, cut between runs (the folders ``runs`` of the lines' keys) where
    the inflated bytes balance (or one part per run, the most there can be)."""
    single = _compressed(lines)
    if len(single) <= part_bytes or len(set(runs)) < 2:
        return [single]
    starts = [i for i in range(len(lines)) if i == 0 or runs[i] != runs[i - 1]]  # where each run begins
    groups = [lines[a:b] for a, b in zip(starts, [*starts[1:], len(lines)])]
    sizes = [sum(map(len, g)) for g in groups]
    total, whole = sum(sizes), stream_checksum(lines)
    count = -(-len(single) // part_bytes)
    while True:
        count = min(count, len(groups), MAX_PARTS)
        done, cut = 0, [list[bytes]() for _ in range(count)]
        for group, size in zip(groups, sizes):  # each run to the part where its middle byte falls
            cut[min(count - 1, (2 * done + size) * count // (2 * total))].extend(group)
            done += size
        cut = [part for part in cut if part]
        split = [_compressed(part, {"part": number, "parts": len(cut), "whole": whole})
                 for number, part in enumerate(cut, 1)]
        if count in (len(groups), MAX_PARTS) or max(map(len, split)) <= part_bytes:
            return split
        count += 1


def _compact_epochs(record: Any) -> Any:
    """``record`` with every float below its ``epochs`` rounded to `EPOCH_DECIMALS` decimals and each stage
    of an epoch's ``pipeline.stages`` cut to its `EPOCH_STAGE_KEYS` (a value that is not a record's object,
    as it is)."""
    def rounded(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, EPOCH_DECIMALS)  # NaN and infinities as they are
        if isinstance(value, dict):
            return {k: rounded(v) for k, v in value.items()}
        return [rounded(v) for v in value] if isinstance(value, list) else value

    def compact(epoch: Any) -> Any:
        pipeline = epoch.get("pipeline") if isinstance(epoch, dict) else None
        if not isinstance(pipeline, dict) or not isinstance(pipeline.get("stages"), list):
            return rounded(epoch)
        stages = [{k: v for k, v in s.items() if k in EPOCH_STAGE_KEYS} if isinstance(s, dict) else s
                  for s in pipeline["stages"]]
        return rounded({**epoch, "pipeline": {**pipeline, "stages": stages}})

    if not isinstance(record, dict) or not isinstance(record.get("epochs"), list):
        return record
    return {k: [compact(e) for e in v] if k == "epochs" else v for k, v in record.items()}


def _read_file(path: str | Path) -> Any:
    """The JSON value of the regular file ``path`` of at most `MAX_LINE_BYTES` (a FIFO is never waited on,
    a device never read).

    Raises:
        JSONFileError: not valid UTF-8 JSON, or nested too deeply to parse.
        OSError: it cannot be read (NotRegularFileError: not a regular file).
        ValueError: it holds more than `MAX_LINE_BYTES`.
    """
    return parse_json(read_regular(path, MAX_LINE_BYTES), path)


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
                      help="write ARCHIVE's files below DEST (every part's, of a split archive: name its "
                           "first)")
    args = parser.parse_args(argv)
    try:
        if args.pack:
            if len(args.pack) > 2:
                parser.error("--pack takes FOLDER and at most one ARCHIVE")
            from pipegnn.timeline import TRACE_NAME  # imports torch: the command line only

            folder = args.pack[0]
            archive = args.pack[1] if len(args.pack) == 2 else folder / ARCHIVE_NAME
            if not is_archive(archive):
                parser.error(f"ARCHIVE {archive}: an archive's name ends in .jsonl.gz")
            files = run_files(folder, beside=(TRACE_NAME,))
            pack(archive, files)
            split = parts(archive)
            unreadable = read(archive, keep=()).unreadable  # every part's
            into = f"{len(split)} parts, {archive.name} to {split[-1].name}" if len(split) > 1 else "one file"
            print(f"packed {len(files)} files of {folder} into {archive} ({into}, "
                  f"{sum(p.stat().st_size for p in split):,} bytes)")
        else:
            written, unreadable = unpack(args.unpack[0], args.unpack[1])  # every part's
            print(f"wrote {len(written)} files of {args.unpack[0]} below {args.unpack[1]}")
    except (ArchiveError, OSError, ValueError) as e:  # a damaged archive; one that cannot be read or
        print(f"error: {e}", file=sys.stderr)          # written; files whose keys no archive holds
        return 2
    for key, reason in unreadable.items():
        print(f"unreadable when packed: {key}: {reason}", file=sys.stderr)
    return 1 if unreadable else 0


if __name__ == "__main__":
    sys.exit(main())
