"""The command line: aggregate result.json records into a table, CSV or Parquet.

    python -m pipegnn.results multirun/... [--where chunks=8] [--csv runs.csv] [--table]
        [--figure table.png [--reference cora=85.5,0.5 ...]]
    python -m pipegnn.results --recompose results/reference/halo_modes

Exits 0 when every listed run completed, 1 when some did not or a sweep job left no record, 2 when
nothing was found or on misuse (see [`main`][pipegnn.results.__main__.main]).
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from pipegnn.folder_walk import FolderTooDeep
from pipegnn.results.figures import draw
from pipegnn.results.leaderboard_plot import plot_leaderboard
from pipegnn.results.rows import integers
from pipegnn.results.stats import LEADERBOARD_SETTINGS, leaderboard, summary
from pipegnn.results.table import NO_RECORD, TABLE_COLUMNS, TableTooLarge, format_table, load, select
from pipegnn.run_record import RECORD_NAME

__all__ = ["main"]

#: The most runs named one by one on stderr (runs that did not complete; unfinished jobs' folders).
_NAMED = 20


def _parse_value(text: str) -> Any:
    """``8`` -> 8, ``0.5`` -> 0.5, ``true`` -> True, ``none``/``null`` -> None, else the text."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    if re.fullmatch(r"[+-]?\d+", low):
        return int(low)
    if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?", low):
        return float(low)
    return text


def _arrow_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns mixing value types (e.g. int and str) as text, which Parquet can store."""
    out = df.copy()
    for name in out.columns[out.dtypes.eq(object)]:
        present = out[name].dropna()
        if len({type(v) for v in present}) > 1:
            out[name] = out[name].map(lambda v: v if v is None or v != v else str(v))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code: 0 every listed run completed, 1 some did not or a sweep
    job has no record (incomplete or missing, even one ``--where`` leaves out: a line on stderr names
    them), 2 nothing found or misuse."""
    parser = argparse.ArgumentParser(
        prog="python -m pipegnn.results",
        description="Aggregate result.json records (one row per run) into a table, CSV or Parquet.")
    parser.add_argument("paths", nargs="*", type=Path,
                        help="sweep or results directories, or records archives (records.jsonl.gz)")
    parser.add_argument("--csv", type=Path, help="write every column of the listed runs here")
    parser.add_argument("--parquet", type=Path, help="same as Parquet (needs pyarrow)")
    parser.add_argument("--where", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="keep runs whose column equals VALUE (repeat a key to accept several "
                             "values; the cfg. prefix is optional: model.hidden=64)")
    parser.add_argument("--columns", help="table columns, comma-separated (default: "
                                          f"{', '.join(TABLE_COLUMNS)})")
    parser.add_argument("--table", action="store_true",
                        help="an OGB-style table instead: one row per setting, test (at best validation) "
                             "and validation accuracy mean ± std over seeds, seeds, parameters, hardware, "
                             "date (--csv then writes it)")
    parser.add_argument("--figure", type=Path, help="with --table: draw it as a figure (PNG) here")
    parser.add_argument("--reference", nargs="+", action="extend", default=[], metavar="DATASET=MEAN,STD",
                        help="with --figure: a published test accuracy (percent) per dataset, "
                             "drawn as a band")
    parser.add_argument("--recompose", action="store_true",
                        help="instead of a table: compose each record's overrides with the presets as they "
                             "are now and name every key that changes the computation and differs from "
                             "the record (exit 1 if any does, or a record kept no overrides)")
    args = parser.parse_args(argv)
    if args.recompose:
        if not args.paths:
            parser.error("give at least one directory")
        return _recompose(args.paths)
    if (args.figure or args.reference) and not args.table:
        parser.error("--figure and --reference draw the --table: give --table too")
    reference = {}
    for item in args.reference:
        dataset, _, numbers = item.partition("=")
        try:
            mean, std = (float(v) for v in numbers.split(","))
        except ValueError:
            parser.error(f"--reference {item!r}: give DATASET=MEAN,STD in percent, e.g. cora=85.5,0.5")
        reference[dataset.strip()] = (mean, std)
    args.paths += [Path(w) for w in args.where if "=" not in w]  # directories given after --where
    if not args.paths:
        parser.error("give at least one directory")
    where: dict[str, list[Any]] = {}
    for item in (w for w in args.where if "=" in w):
        key, _, value = item.partition("=")
        where.setdefault(key.strip(), []).append(_parse_value(value))
    if args.parquet and importlib.util.find_spec("pyarrow") is None:
        parser.error("--parquet needs pyarrow, which is not installed (pip install -r requirements.txt)")
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else TABLE_COLUMNS
    try:
        everything = load(args.paths)
        if everything.empty:
            print(f"error: no {RECORD_NAME} found under {', '.join(map(str, args.paths))}", file=sys.stderr)
            return 2
        df = select(everything, where)
        # --table averages completed runs; without any, the runs themselves (their settings and status).
        averaged = args.table and bool((df["status"] == "completed").any())
        if args.table and not averaged and not df.empty:
            print(f"--table: none of the {len(df)} runs completed, so there is nothing to average; the runs:",
                  file=sys.stderr)
        board = leaderboard(df) if averaged else None
        table = format_table(df, columns) if board is None else format_table(board, [
            *(c for c in LEADERBOARD_SETTINGS if c in board), "test", "val", "seeds", "runs", "parameters",
            "hardware", "date"])
    except (FileNotFoundError, FolderTooDeep, KeyError, TableTooLarge) as e:
        message = e.strerror if isinstance(e, FolderTooDeep) else e.args[0] if isinstance(e, KeyError) else e
        print(f"error: {message}", file=sys.stderr)
        return 2
    if df.empty:
        print(f"error: none of the {len(everything)} runs matches --where {' '.join(args.where)}",
              file=sys.stderr)
        return 2
    print(table)
    print(summary(df), flush=True)
    not_completed = df[df["status"] != "completed"]
    for path, status, error in zip(not_completed["path"][:_NAMED], not_completed["status"][:_NAMED],
                                   not_completed["error"][:_NAMED]):
        print(f"{status}: {path}: {error}", file=sys.stderr)
    if len(not_completed) > _NAMED:
        print(f"... and {len(not_completed) - _NAMED:,} more runs that did not complete (the table lists "
              "them)", file=sys.stderr)
    unfinished = everything[everything["status"].isin(NO_RECORD)]
    if not unfinished.empty:
        print(_unfinished_line(unfinished, len(everything), left_out=len(unfinished) - df["status"].isin(
            NO_RECORD).sum()), file=sys.stderr)
    if args.csv:
        integers(df if board is None else board).to_csv(args.csv, index=False)
    if args.figure and board is not None:
        draw(plot_leaderboard, df, args.figure, reference=reference)
    if args.parquet:
        _arrow_safe(df).to_parquet(args.parquet, index=False)
    return 0 if (df["status"] == "completed").all() and unfinished.empty else 1


def _recompose(paths: Sequence[Path]) -> int:
    """``--recompose``: one line per record that drifted or cannot be checked, then a summary; 0 when
    every record recomposes to its config, 1 otherwise, 2 when there is no record."""
    from pipegnn.results.reproduce import TooManyRecords, recompose

    try:
        drifts = [d for path in paths for d in recompose(path)]
    except FolderTooDeep as e:
        print(f"error: {e.strerror}", file=sys.stderr)
        return 2
    except TooManyRecords as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not drifts:
        print(f"error: no {RECORD_NAME} found under {', '.join(map(str, paths))}", file=sys.stderr)
        return 2
    unchecked = [d for d in drifts if d.overrides is None and d.error is None]
    bad = [d for d in drifts if d.error is not None or d.differs]
    for d in bad:
        what = d.error if d.error is not None else ", ".join(
            f"{k}={a!r} in it, {b!r} now" for k, (a, b) in d.differs.items())
        kind = "cannot recompose" if d.error is not None else "drifted"
        print(f"{kind}: {d.path}: {what}", file=sys.stderr)
    same = len(drifts) - len(bad) - len(unchecked)
    print(f"{len(drifts)} records: {same} recompose to their config at this commit, {len(bad)} do not"
          + (f", {len(unchecked)} kept no overrides (written before records kept them): not checked"
             if unchecked else ""))
    return 0 if not bad and not unchecked else 1


def _unfinished_line(unfinished: pd.DataFrame, total: int, left_out: int) -> str:
    """``error: sweep not finished: 2 of 6 runs have no result.json (1 incomplete, 1 missing): <job
    folder>, ...``."""
    counts = unfinished["status"].value_counts()
    kinds = ", ".join(f"{counts[s]} {s}" for s in NO_RECORD if s in counts)
    shown = [str(Path(p).parent) for p in unfinished["path"][:_NAMED]]
    more = len(unfinished) - len(shown)
    folders = ", ".join(shown) + (f" and {more:,} more" if more else "")
    n = len(unfinished)
    hidden = f"; {left_out} not matching --where" if left_out else ""
    return (f"error: sweep not finished: {n} of {total} run{'s' * (total != 1)} "
            f"ha{'ve' if n != 1 else 's'} no {RECORD_NAME} "
            f"({kinds}{hidden}): {folders}")


if __name__ == "__main__":
    sys.exit(main())
