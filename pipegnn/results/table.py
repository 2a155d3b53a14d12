"""The runs table: one row per result record (and per sweep job that left none), filtered and printed.

Aggregate a sweep in a notebook with ``load("multirun/...")`` (one row per run, made by
[`pipegnn.results.rows.flatten`][pipegnn.results.rows.flatten]: columns in `COLUMNS` plus
``cfg.<dotted key>`` for every config leaf), or from the shell with
``python -m pipegnn.results multirun/... [--where chunks=8] [--csv runs.csv]``.

Besides one row per record, [`load`][pipegnn.results.table.load] lists the jobs of a Hydra sweep that left
none: a job Hydra started (its folder holds ``.hydra/``) without a ``result.json`` is ``incomplete`` (killed,
died, or still running), a job the sweep's ``multirun.yaml`` planned that has no folder is ``missing`` (never
started); the command line exits non-zero when there are any. A record that is not valid JSON or not shaped
like a record (a section of the wrong type) is a row with status ``unreadable`` and the reason as its error.

The ``pipeline_*`` columns come from the record's ``pipeline`` section (what the stage timeline measured,
medians over epochs; see [`pipegnn.timeline.figures`][pipegnn.timeline.figures]). The command line's default
table leaves them out (it would not fit a terminal); ask for them::

    python -m pipegnn.results multirun/... --columns engine,chunks,pipeline_bubble,pipeline_ideal_speedup
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import pandas as pd

from pipegnn.results.archive_format import ArchiveError, is_archive
from pipegnn.results.archive_read import archives_of, entries
from pipegnn.results.record_files import (
    RECORD_NAME,
    RecordError,
    distinct,
    find_records,
    identities,
    load_record,
    natural_key,
    place_of,
    record_of,
)
from pipegnn.results.rows import COLUMNS, flatten
from pipegnn.run_record import RunRecord, Status

if TYPE_CHECKING:
    from pipegnn.results.sweep import Listing

__all__ = ["MAX_TABLE_CELLS", "NO_RECORD", "ROW_STATUSES", "STATUSES", "TABLE_COLUMNS", "UNREADABLE",
           "TableTooLarge", "column", "format_table", "load", "select"]

#: Statuses a run writes in its record ([`Status`][pipegnn.run_record.Status]).
STATUSES = tuple(s.value for s in Status)
#: Status of a row whose record file cannot be used (not valid JSON, or not shaped like a record).
UNREADABLE = "unreadable"
#: Statuses of a sweep's jobs without a record: ``incomplete`` (Hydra started the job: its folder holds
#: ``.hydra/``, but it wrote no ``result.json``: killed, died, or still running) and ``missing`` (the
#: sweep's ``multirun.yaml`` planned the job, which has no folder: never started).
NO_RECORD = ("incomplete", "missing")
#: Every status a row of [`load`][pipegnn.results.table.load] can have (a record with another status is
#: unreadable).
ROW_STATUSES = (*STATUSES, UNREADABLE, *NO_RECORD)


#: The most cells (each row's flattened keys, summed over its rows) one [`load`][pipegnn.results.table.load]
#: builds: every committed reference folder at once fills 141,155 in 1,214 rows, a sweep of 10,000 jobs
#: (the most a plan may count) of 300 columns 3,000,000. Past it, `TableTooLarge` (2,000 records of 9,500
#: config keys each, within every bound of one record, filled 19 million cells in 58 s and 3.2 GB).
MAX_TABLE_CELLS = 5_000_000


class TableTooLarge(ValueError):
    """A listing's rows fill more than `MAX_TABLE_CELLS` cells (``str()`` names where it stopped)."""


class _Listed:
    """What one listing has read: every file by its
    [`identities`][pipegnn.results.record_files.identities] (a hard link is the file it links: listed once,
    as a symbolic link is), the cells of its rows so far, and what it read of the sweeps' Hydra files (one
    budget over every folder it lists: [`Listing`][pipegnn.results.sweep.Listing])."""

    def __init__(self) -> None:
        self.seen: set[Any] = set()
        self.cells = 0
        self.jobs: Listing | None = None  # the sweeps' Hydra files read, over every folder listed

    def first(self, path: Path) -> bool:
        """Whether ``path`` was not listed yet; it is from now on."""
        keys = identities(path)
        if keys & self.seen:
            return False
        self.seen |= keys
        return True

    def count(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row``, counted against `MAX_TABLE_CELLS`.

        Raises:
            TableTooLarge: the rows so far fill more than `MAX_TABLE_CELLS` cells."""
        self.cells += len(row)
        if self.cells > MAX_TABLE_CELLS:
            raise TableTooLarge(f"the records read fill more than {MAX_TABLE_CELLS:,} table cells (rows x "
                                f"their columns) by {row.get('path')}: list fewer folders at a time")
        return row


#: Columns of the command line's table unless ``--columns`` is given. Its accuracy is the one every view
#: reports (``--table``'s ``test``, the reference tables, the README): the test accuracy at the best
#: validation epoch; ``test_acc`` (the last epoch's) is one ``--columns`` away.
TABLE_COLUMNS = ("dataset", "model", "framework", "engine", "chunks", "halo", "partition", "status",
                 "test_acc_at_best_val", "epoch_time_median_s", "peak_rss_mb", "inflation")
#: `_record_row`'s default: read the record from its file.
_FROM_FILE = object()


def column(df: pd.DataFrame, key: str) -> str:
    """``key``, or ``cfg.key`` when only that is a column (so ``model.hidden`` works)."""
    for name in (key, f"cfg.{key}"):
        if name in df.columns:
            return name
    raise KeyError(f"no column {key!r} (nor cfg.{key}); columns: {', '.join(df.columns)}")


def select(df: pd.DataFrame, where: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Rows of ``df`` whose column equals each value of ``where`` (a list or tuple accepts any of its
    values; None matches missing). Keys may drop the ``cfg.`` prefix.

    Raises:
        KeyError: a key names no column.
    """
    mask = pd.Series(True, index=df.index)
    for key, accepted in (where or {}).items():
        col = df[column(df, key)]
        match = pd.Series(False, index=df.index)
        for value in accepted if isinstance(accepted, (list, tuple, set, frozenset)) else [accepted]:
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            match |= col.isna() if missing else (col == value).fillna(False).astype(bool)
        mask &= match
    return df[mask].reset_index(drop=True)


def load(path: str | Path | Iterable[str | Path],
         where: Mapping[str, Any] | None = None, jobs: bool = True) -> pd.DataFrame:
    """One row per ``result.json`` under ``path`` (a directory, a record, a records archive, or a list of
    them), flattened by [`flatten`][pipegnn.results.rows.flatten] and filtered by ``where`` (see
    [`select`][pipegnn.results.table.select]), in path order.

    A directory's records archives (``records.jsonl.gz`` and the further parts of a split one,
    [`pipegnn.results.archive`][pipegnn.results.archive]; an archive named by its first part: every part)
    give the rows their files would: each record's
    ``path`` is its place were the archive unpacked (a file that is there too gives one row). A damaged
    archive is one ``unreadable`` row, its ``path`` the archive.

    A file that is not valid JSON or not shaped like a record (see
    [`check_record`][pipegnn.results.record_files.check_record]) becomes a row with status ``unreadable`` and
    the reason as its error. With ``jobs`` (the default), each directory also gets one row per job of a Hydra
    sweep below it without a record (statuses `NO_RECORD`): ``incomplete``, a job folder with ``.hydra/`` but
    no ``result.json`` (its config columns come from ``.hydra/config.yaml``), and ``missing``, a job the
    sweep's ``multirun.yaml`` planned that has no folder (only the columns its overrides set). Keep
    ``where={"status": "completed"}`` for finished runs only. Nothing found: an empty frame with the
    `COLUMNS`. A file is listed once, whichever name leads to it (a symbolic or a hard link), and so is a
    path given twice.

    Raises:
        TableTooLarge: the rows fill more than `MAX_TABLE_CELLS` cells."""
    paths = distinct(Path(p) for p in ([path] if isinstance(path, (str, os.PathLike)) else path))
    rows: list[dict[str, Any]] = []
    listed = _Listed()
    for root in paths:
        found = []
        for file in [] if is_archive(root) else find_records(root):
            if listed.first(file):
                found.append(listed.count(_record_row(file)))
        for archive in archives_of(root):
            found += _archive_rows(archive, listed)
        if jobs and Path(root).is_dir():
            found += _job_rows(Path(root), listed)
        rows += sorted(found, key=lambda row: natural_key(row["path"]))
    # per-stage columns (stage 2 before stage 10), then the config leaves
    extra = sorted({k for row in rows for k in row if k not in COLUMNS},
                   key=lambda k: (k.startswith("cfg."), natural_key(k)))
    rows = [{k: _encodable(v) for k, v in row.items()} for row in rows]
    return select(pd.DataFrame(rows, columns=[*COLUMNS, *extra]), where)


def _encodable(value: Any) -> Any:
    """``value``, a text that UTF-8 cannot encode (a folder's name of bytes that are no UTF-8, which Python
    keeps as lone surrogates) with those characters as backslash escapes (``run\\udcff``): pandas' text
    columns (pyarrow) refuse them."""
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _record_row(file: Path, value: Any = _FROM_FILE) -> dict[str, Any]:
    """The row of one record file, or of its ``value`` read from an archive; an ``unreadable`` row when it
    cannot be used."""
    try:
        return flatten(load_record(file) if value is _FROM_FILE else record_of(value, file), path=file)
    except RecordError as e:
        reason = e.reason
    except OSError as e:
        reason = f"{type(e).__name__}: {e}"
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:  # a shape check_record missed
        reason = f"malformed record: {type(e).__name__}: {e}"
    return _unreadable_row(file, reason)


def _unreadable_row(file: Path, reason: str | None, status: str = UNREADABLE,
                    config: dict[str, Any] | None = None, choices: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The row of a file or a job without a usable record (``status`` unreadable, incomplete, missing):
    its error (``reason``), what is known of its config and choices, no epochs (NaN)."""
    row = flatten(RunRecord(status=Status.FAILED, error=reason, config=config or {}, choices=choices or {},
                            env={}), path=file)
    row.update(status=status, epochs=math.nan)
    return row


def _archive_rows(archive: Path, listed: _Listed) -> list[dict[str, Any]]:
    """The rows of the records in ``archive`` (at their unpacked places) not listed yet, flattened one
    at a time (an archive holds a sweep); one ``unreadable`` row for the archive when it is damaged."""
    if not listed.first(archive):
        return []
    rows, places = [], set()
    try:
        for entry in entries(archive):
            file = archive.parent / entry.path
            if file.name != RECORD_NAME or place_of(file) in listed.seen:
                continue
            places.add(place_of(file))
            rows.append(listed.count(_record_row(file, entry.value) if entry.unreadable is None
                                     else _unreadable_row(file, entry.unreadable)))
    except ArchiveError as e:  # naming the part, when another part of the archive is damaged
        return [_unreadable_row(archive, e.reason if e.path == archive else f"{e.path.name}: {e.reason}")]
    except OSError as e:
        return [_unreadable_row(archive, f"{type(e).__name__}: {e}")]
    listed.seen |= places
    return rows


def _job_rows(root: Path, listed: _Listed) -> list[dict[str, Any]]:
    """Rows of the sweep jobs below ``root`` without a record (see
    [`pipegnn.results.sweep.unrecorded_jobs`][pipegnn.results.sweep.unrecorded_jobs])."""
    # (imports OmegaConf: only when a folder is loaded)
    from pipegnn.results.sweep import Listing, unrecorded_jobs

    if listed.jobs is None:  # one budget of Hydra files over every folder of the listing
        listed.jobs = Listing()
    rows = []
    for job in unrecorded_jobs(root, listed.jobs):
        file = job.file or job.directory / RECORD_NAME
        if listed.first(file):
            rows.append(listed.count(_unreadable_row(file, job.error, job.status, job.config, job.choices)))
    return rows


def format_table(df: pd.DataFrame, columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """``df[columns]`` as an aligned text table: numbers right-aligned, 3-4 significant digits."""
    cols, right = [], []
    for name in (column(df, c) for c in columns):
        col = df[name]
        numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
        integral = numeric and all(float(v).is_integer() for v in col.dropna())
        right.append(numeric)
        cols.append([_fmt(v, integral) for v in col.tolist()])
    widths = [max([len(c), *(len(v) for v in col)]) for c, col in zip(columns, cols)]
    lines = ["  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(columns, widths, right))]
    for i in range(len(df)):
        lines.append("  ".join(col[i].rjust(w) if r else col[i].ljust(w)
                               for col, w, r in zip(cols, widths, right)))
    return "\n".join(line.rstrip() for line in lines)


def _fmt(value: Any, integral: bool) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        if integral or abs(value) >= 1000:
            return f"{value:.0f}"
        return f"{value:.4g}" if abs(value) >= 1 else f"{value:.3g}"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."
