"""Reference results from finished sweeps: their records, aggregate tables and figures.

    .venv/bin/python experiments/report.py multirun/reference results/reference
    .venv/bin/python experiments/report.py multirun/halo_metis reports      # one sweep: reports/halo_metis/

``sweeps`` holds one sweep folder per preset (``multirun/reference/poster_offline`` ...; see `make
reference`), or is one sweep itself (a folder with Hydra's ``multirun.yaml`` or with job folders holding a
``result.json``: :func:`is_sweep`), or with ``--one`` holds the sweeps of one preset whose grid ran in
parts (``multirun/study_poster_computers/{k1,grid}``: one report of them all, each run under
``records/<sweep>/<job>/``). For each sweep, under ``out/<its folder's name>/``:

- ``records.jsonl.gz``: every record of the sweep (resolved config, seeds, versions, git sha, per-epoch
  history) - the source of every number below - with the run's stage timeline where it wrote one, packed
  as ``records/<job>/result.json`` and ``records/<job>/trace.json`` (:mod:`pipegnn.results.archive`: one
  compact file a clone carries, split into ``records-2.jsonl.gz``, ... past 2 MiB; ``python -m
  pipegnn.results.archive --unpack`` writes the files back, and :func:`pipegnn.results.load` reads it as it
  reads them);
- ``runs.csv``: one row per run (the main columns of :func:`pipegnn.results.load`);
- ``summary.csv``: mean, std and count over seeds per setting of the varying keys, with ``overhead``:
  epoch time over the chunks=1 run of the same dataset, model (and hidden size), graph (nodes, edges,
  density), framework, devices, halo and partition (NaN where the sweep has no chunks=1 run; with
  targets=all or halo none that run is full-graph training);
- ``*.png``: the figures of :mod:`pipegnn.results.figures` the sweep has data for (the others are skipped;
  :func:`figures_of` narrows them for presets where only some mean something);
- ``timeline.png``: the traced step of one run (:func:`pipegnn.results.plot_timeline`): of the
  completed runs with a ``trace.json``, the one with the most chunks (the first by path among equals);
  none when no run has a trace.

Exit status 1, after everything that could be written was, when a job left no record, a record or a
``trace.json`` cannot be read (not JSON, or not a regular file: a FIFO, a link to a device), or a sweep's
``multirun.yaml`` is damaged: stderr names each file and why.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Collection

import pandas as pd

from pipegnn import results
from pipegnn.results import archive
from pipegnn.timeline import TRACE_NAME

#: Per-run columns of runs.csv.
RUN_COLUMNS = ("dataset", "model", "num_nodes", "num_edges", "framework", "engine", "devices", "chunks",
               "halo", "fanouts", "partition", "targets", "evaluation", "seed", "status", "error", "epochs",
               "monitor", "test_acc", "test_acc_at_best_val", "best_val_acc", "epoch_time_median_s",
               "eval_time_median_s", "microbatch_build_s", "peak_rss_mb", "peak_rss_total_mb",
               "peak_device_mb", "inflation", "replication", "cut_edge_fraction", "git_sha")
#: Settings a summary groups by when they vary in the sweep (dataset and model always).
SETTINGS = ("dataset", "model", "num_nodes", "num_edges", "cfg.dataset.density", "cfg.dataset.avg_degree",
            "framework", "setup", "pipeline_schedule", "pipeline_balance_source", "cfg.engine.timeline",
            "cfg.engine.threads", "halo", "fanouts", "partition", "targets", "evaluation", "monitor",
            "cfg.model.hidden", "chunks")
METRICS = ("test_acc", "test_acc_at_best_val", "epoch_time_median_s", "overhead", "peak_rss_mb",
           "peak_rss_total_mb", "inflation", "replication", "cut_edge_fraction", "pipeline_bubble",
           "pipeline_bubble_theoretical", "pipeline_imbalance", "pipeline_ideal_speedup", "tta_train_s",
           "tta_wall_s", "best_wall_s")
#: File name: (figure function, its keyword arguments).
FIGURES = {"epoch_time_vs_chunks.png": (results.plot_epoch_time_vs_chunks, {}),
           "accuracy_vs_chunks.png": (results.plot_accuracy_vs_chunks, {"metric": "test_acc_at_best_val"}),
           "memory_vs_chunks.png": (results.plot_memory_vs_chunks, {}),
           "inflation_by_partitioner.png": (results.plot_inflation_by_partitioner, {}),
           "scaling.png": (results.plot_scaling, {}),
           "scaling_edges.png": (results.plot_scaling, {"x": "num_edges"}),
           "scaling_hidden.png": (results.plot_scaling, {"x": "model.hidden"}),
           "speedup_vs_chunks.png": (results.plot_speedup_vs_chunks, {}),
           "time_to_accuracy_vs_chunks.png": (results.plot_time_to_accuracy_vs_chunks, {}),
           "time_to_accuracy_vs_memory.png": (results.plot_time_to_accuracy_vs_memory, {}),
           "time_to_accuracy_vs_total_memory.png": (results.plot_time_to_accuracy_vs_memory,
                                                    {"memory": "total"})}

#: The figures that mean something for a preset (others: every figure it has data for). The ablations
#: run 5 epochs, so their accuracy is no result; the scaling presets have only chunks 1 and 8.
PRESET_FIGURES = {"pipeline": ["speedup_vs_chunks.png"], "scaling": ["scaling.png"],
                  "ablation_nodes": ["scaling.png"], "ablation_density": ["scaling_edges.png"],
                  "ablation_hidden": ["scaling_hidden.png"],
                  "historical_gap": ["accuracy_vs_chunks.png"],
                  # historical_gap's historical/all half with one dropout mask per node and step
                  "historical_gap_node_mask": []}
#: Figures by the folder's prefix: experiment=deep's settings (deep_<dataset>_<setting>[_<variant>]), one
#: sweep each: an accuracy table (summary.csv), no curve; the map (experiment=sampled_map*) and its slices
#: (sampled_map_<dataset>_<model>): time to accuracy against memory, per process and in all.
PREFIX_FIGURES = {"deep_": [],
                  "sampled_map": ["time_to_accuracy_vs_memory.png", "time_to_accuracy_vs_total_memory.png"]}


def figures_of(name: str) -> list[str]:
    """The figures a results folder gets: its preset's (:data:`PRESET_FIGURES`), else its prefix's
    (:data:`PREFIX_FIGURES`), else every figure it has data for."""
    if name in PRESET_FIGURES:
        return PRESET_FIGURES[name]
    prefix = next((p for p in PREFIX_FIGURES if name.startswith(p)), None)
    return list(FIGURES) if prefix is None else PREFIX_FIGURES[prefix]


def pack_records(sweep: Path, out: Path) -> tuple[list[Path], int]:
    """Pack every result.json below ``sweep``, and the trace.json beside it if any, into
    ``out/records.jsonl.gz`` (and its further parts), each under ``records/`` at its path below ``sweep``
    (so the rows' paths are those of the copies earlier reports wrote, whose folder ``out/records`` goes);
    returns the archive's parts and the number of records."""
    files = archive.run_files(sweep, beside=(TRACE_NAME,), under="records")
    packed = archive.parts(archive.pack(out / archive.ARCHIVE_NAME, files))
    if (out / "records").exists():
        shutil.rmtree(out / "records")
    return packed, sum(Path(key).name == results.RECORD_NAME for key in files)


def timeline_run(df: pd.DataFrame, traces: Collection[Path]) -> Path | None:
    """The run directory drawn in timeline.png: of the completed runs with a trace.json (among
    ``traces``), the one with the most chunks, the first in ``df``'s order (by path) among equals; None
    when no run has a trace."""
    done = df[df["status"] == "completed"]
    traced = done[[Path(p).parent / TRACE_NAME in traces for p in done["path"]]]
    if traced.empty:
        return None
    return Path(traced.sort_values("chunks", ascending=False, kind="stable")["path"].iloc[0]).parent


def draw_timeline(packed: Path, run: Path, path: Path) -> str | None:
    """Draw the trace of ``run`` (its folder as :func:`pipegnn.results.load` names it) in the archive
    ``packed`` (its first part) to ``path``; None, or why the trace cannot be read (naming it)."""
    trace = run / TRACE_NAME
    key = trace.relative_to(packed.parent).as_posix()
    with tempfile.TemporaryDirectory() as tmp:
        written, unreadable = archive.unpack(packed, tmp, keep={key})
        if key in unreadable:
            return f"{trace}: {unreadable[key]}"
        try:
            results.draw(results.plot_timeline, written[0], path)
        except (OSError, ValueError) as e:  # JSONFileError: not a Chrome trace
            return f"{trace}: {getattr(e, 'reason', e)}"
    return None


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """Mean/std/count over seeds of :data:`METRICS` per setting of the keys that vary."""
    data = results.with_setup(df)
    shape = [k for k in ("cfg.model.hidden", "cfg.dataset.density", "cfg.dataset.avg_degree") if k in data]
    data["overhead"] = results.relative(
        data, "epoch_time_median_s", {"chunks": 1},
        within=("dataset", "model", "num_nodes", "num_edges", "framework", "setup", "halo", "partition",
                *shape))
    by = [k for k in SETTINGS if k in ("dataset", "model", "chunks")
          or (k in data and data[k].nunique(dropna=False) > 1)]
    table = results.summarize(data, by, [m for m in METRICS if data[m].notna().any()])
    return table.dropna(axis="columns", how="all")


def report(sweep: Path, out: Path) -> int:
    """Pack ``sweep``'s records into ``out`` and write its tables and figures; returns the number of
    problems, each named on stderr: the sweep's jobs that left no record (incomplete or missing), a
    damaged ``multirun.yaml``, records that cannot be read, and a trace that cannot be drawn."""
    unrecorded = results.unrecorded_jobs(sweep)
    for job in unrecorded:
        if job.file is not None:
            print(f"{sweep.name}: {job.status}: {job.error}", file=sys.stderr)
        else:
            print(f"{sweep.name}: job {job.directory} has no record ({job.status})", file=sys.stderr)
    packed, records = pack_records(sweep, out)
    df = results.load(packed[0])  # every part's
    unreadable = df[df["status"] == results.UNREADABLE]
    for row in unreadable.itertuples():
        print(f"{sweep.name}: unreadable record {row.path}: {row.error}", file=sys.stderr)
    into = packed[0] if len(packed) == 1 else f"{packed[0]} ({len(packed)} parts)"
    print(f"{sweep.name}: {records} records packed into {into}; {results.summary(df)}")
    results.integers(df[[results.column(df, c) for c in RUN_COLUMNS]]).to_csv(out / "runs.csv", index=False)
    table = summary_table(df)
    table.to_csv(out / "summary.csv", index=False, float_format="%.6g")
    if "runs" in table and len(table):
        low, high = int(table["runs"].min()), int(table["runs"].max())
        runs = low if low == high else f"{low}-{high}"
        print(f"{sweep.name}: {len(table)} settings, {runs} runs (seeds) each")
    for stale in out.glob("*.png"):
        stale.unlink()
    for name in figures_of(sweep.name):
        plot, kwargs = FIGURES[name]
        results.draw(plot, df, out / name, **kwargs)
    listed = archive.read(packed[0], keep=())  # every part's
    traces = {out / key for key in listed.paths if Path(key).name == TRACE_NAME}
    # every trace that could not be packed (not JSON; a FIFO, a link to a device: not a regular file)
    broken = {out / key: why for key, why in listed.unreadable.items() if Path(key).name == TRACE_NAME}
    for trace, why in broken.items():
        print(f"{sweep.name}: unreadable trace: {trace}: {why}", file=sys.stderr)
    run = timeline_run(df, traces)
    if run is not None:
        print(f"timeline.png: the traced step of {run.relative_to(out)}")
        problem = draw_timeline(packed[0], run, out / "timeline.png")
        if problem is not None and run / TRACE_NAME not in broken:  # else named above
            print(f"{sweep.name}: unreadable trace: {problem}", file=sys.stderr)
            broken[run / TRACE_NAME] = problem
    return len(unrecorded) + len(unreadable) + len(broken)


def is_sweep(folder: Path) -> bool:
    """Whether ``folder`` is one sweep (Hydra's ``multirun.yaml``, or a job folder with a record), not a
    folder of sweeps."""
    if (folder / "multirun.yaml").exists():
        return True
    return any((job / results.RECORD_NAME).is_file() for job in folder.iterdir() if job.is_dir())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", type=Path,
                        help="a folder holding one sweep folder per preset, or one sweep")
    parser.add_argument("out", type=Path, help="where the reference results go (e.g. results/reference): "
                                               "each sweep's into out/<its folder's name>")
    parser.add_argument("--only", nargs="+", metavar="PRESET", help="only these sweep folders")
    parser.add_argument("--one", action="store_true",
                        help="the folder's sweeps are one preset's (parts of its grid run as sweeps of their "
                             "own): one report of them all, into out/<the folder's name>")
    args = parser.parse_args(argv)
    if not args.sweeps.is_dir():
        parser.error(f"{args.sweeps} is not a folder")
    if args.one and args.only:
        parser.error("--one reports every sweep of the folder together: --only picks among sweeps")
    if args.one or is_sweep(args.sweeps):
        if args.only:
            parser.error(f"{args.sweeps} is one sweep, not a folder of sweeps: --only picks among sweeps")
        what = "its sweeps are one preset's" if args.one else "is one sweep"
        print(f"{args.sweeps} {what}: its report goes to {args.out / args.sweeps.name}")
        sweeps = [args.sweeps]
    else:
        sweeps = sorted(p for p in args.sweeps.iterdir()
                        if p.is_dir() and (not args.only or p.name in args.only))
    if not sweeps:
        named = f" named {', '.join(args.only)}" if args.only else ""
        parser.error(f"no sweep folder in {args.sweeps}{named}")
    problems = sum(report(sweep, args.out / sweep.name) for sweep in sweeps)
    if problems:
        print(f"error: {problems} job(s) or file(s) left no usable record or trace (named above): the "
              "reference results miss them", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
