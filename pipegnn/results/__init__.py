"""After training: result records read back, the runs table, its statistics and figures, and sweeps on disk
(what a run writes and claims, and the Hydra callbacks, are the run side's: [`pipegnn.runs`][pipegnn.runs]).

- [`record_files`][pipegnn.results.record_files]: each run's ``result.json`` found, read, checked;
- [`archive`][pipegnn.results.archive]: a sweep's records (and traces) as one ``records.jsonl.gz`` (in
  parts past 2 MiB), which [`load`][pipegnn.results.table.load] reads as it reads the files; used through
  its module (``archive.pack``, ``archive.read``, ``archive.unpack``: short names that would be ambiguous
  here), so not re-exported, nor
  are its parts' ([`archive_format`][pipegnn.results.archive_format],
  [`archive_read`][pipegnn.results.archive_read]), whose names it carries;
- [`rows`][pipegnn.results.rows]: one record as one row ([`flatten`][pipegnn.results.rows.flatten]; what each
  column means: `COLUMNS`);
- [`table`][pipegnn.results.table]: the runs table ([`load`][pipegnn.results.table.load]: one row per record,
  and per sweep job that left none), filtered ([`select`][pipegnn.results.table.select]) and printed
  ([`format_table`][pipegnn.results.table.format_table]);
- [`stats`][pipegnn.results.stats]: statistics of the table ([`summary`][pipegnn.results.stats.summary],
  [`summarize`][pipegnn.results.stats.summarize], [`relative`][pipegnn.results.stats.relative],
  [`leaderboard`][pipegnn.results.stats.leaderboard]);
- [`figures`][pipegnn.results.figures]: figures of the table;
  [`timeline_plot`][pipegnn.results.timeline_plot]: the stage timeline of one traced step
  ([`plot_timeline`][pipegnn.results.timeline_plot.plot_timeline]);
  [`tta_plot`][pipegnn.results.tta_plot]: time to accuracy against peak memory, a point per setting
  ([`plot_time_to_accuracy_vs_memory`][pipegnn.results.tta_plot.plot_time_to_accuracy_vs_memory]);
- [`sweep`][pipegnn.results.sweep]: a sweep's jobs on disk; [`sweep_plan`][pipegnn.results.sweep_plan]: the
  jobs its ``multirun.yaml`` planned; [`hydra_files`][pipegnn.results.hydra_files]: Hydra's files read as
  data;
  [`reproduce`][pipegnn.results.reproduce]: records' overrides composed at this commit against their config;
- ``python -m pipegnn.results``: the command line ([`pipegnn.results.__main__`][pipegnn.results.__main__]; not
  re-exported: no library module imports a command-line tool).

In a notebook: ``from pipegnn import results; df = results.load("multirun/...")``. Every name below
is importable from here; each is loaded with its module on first use, so that importing one module pulls
in neither matplotlib nor Hydra.
"""
from __future__ import annotations

import importlib
from typing import Any

#: The public names of each module (but [`archive`][pipegnn.results.archive] and its parts), all re-exported
#: here.
_EXPORTS = {
    "record_files": ("MAX_RECORD_BYTES", "RECORD_NAME", "RecordError", "check_record", "distinct",
                     "find_records", "identities", "is_entry", "load_record", "natural_key", "place_of",
                     "record_of"),
    "rows": ("COLUMNS", "INTEGER_COLUMNS", "flatten", "integers"),
    "table": ("MAX_TABLE_CELLS", "NO_RECORD", "ROW_STATUSES", "STATUSES", "TABLE_COLUMNS", "TableTooLarge",
              "UNREADABLE", "column", "format_table", "load", "select"),
    "stats": ("LEADERBOARD_SETTINGS", "WITHIN", "device_type", "leaderboard", "relative", "setup_label",
              "summarize", "summary", "with_setup"),
    "figures": ("DPI", "NoData", "PANEL_SIZE", "draw", "plot_accuracy_vs_chunks", "plot_epoch_time_vs_chunks",
                "plot_inflation_by_partitioner", "plot_memory_vs_chunks", "plot_scaling",
                "plot_speedup_vs_chunks", "plot_time_to_accuracy_vs_chunks", "repeats_note"),
    "timeline_plot": ("plot_timeline",),
    "leaderboard_plot": ("plot_leaderboard",),
    "tta_plot": ("plot_time_to_accuracy_vs_memory", "setting_label"),
    "sweep": ("INCOMPLETE", "Job", "Listing", "sweep_jobs", "unrecorded_jobs"),
    "sweep_plan": ("MAX_PLANNED_CHARS", "MAX_PLANNED_JOBS", "MAX_PLANNED_OVERRIDES", "SweepPlanError",
                   "expand_jobs", "planned_jobs"),
    "hydra_files": ("MAX_RESOLVED_CHARS", "MAX_YAML_BYTES", "read_hydra_file"),
    "reproduce": ("MAX_COMPOSITIONS", "MAX_OVERRIDES", "MAX_OVERRIDES_CHARS", "MAX_OVERRIDE_CHARS",
                  "MAX_RECOMPOSED", "MAX_RECOMPOSED_BYTES", "PLACE_KEYS", "Compositions", "Drift",
                  "TooManyRecords", "command_jobs", "composed_now", "computed_keys", "drift", "recompose"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
