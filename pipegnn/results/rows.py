"""A result record as one row of the runs table: the `COLUMNS` (what each means), then the
pipeline's per-stage figures and every config leaf as ``cfg.<dotted key>``;
[`flatten`][pipegnn.results.rows.flatten] makes the row, [`integers`][pipegnn.results.rows.integers] gives a
table's counts back as integers for a file."""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from pipegnn.run_record import RunRecord, Status

__all__ = ["COLUMNS", "INTEGER_COLUMNS", "flatten", "integers"]

#: Columns of counts (NaN where unknown, so float columns in [`load`][pipegnn.results.table.load]'s table;
#: [`integers`][pipegnn.results.rows.integers] gives them back as integers, for a file).
INTEGER_COLUMNS = ("chunks", "seed", "epochs", "best_epoch", "stopped_epoch", "num_nodes", "num_edges")
#: Columns of [`flatten`][pipegnn.results.rows.flatten] / [`load`][pipegnn.results.table.load], in order, with
#: their meaning. Missing values are NaN (numbers) or None (text, flags); records without a ``pipeline``
#: section (older ones) have none of the ``pipeline_*`` values. After them come ``pipeline_stage<s>_busy_s``
#: (stage s's forward + backward + recompute seconds per step, median over epochs) for every stage of the
#: record, then every config leaf as ``cfg.<dotted key>`` (lists joined by ',').
COLUMNS: dict[str, str] = {
    "path": "the result.json file (where it would be for an incomplete or missing job)",
    "status": "completed | failed | invalid | oom | interrupted (the record's) | unreadable (not valid JSON, "
              "or not shaped like a record) | incomplete (a sweep job Hydra started that wrote no record) | "
              "missing (a job the sweep planned that never started)",
    "error": "first line of the error message (None when completed; why, for the other statuses)",
    **{g: f"Hydra choice of the group (else config {g}.name)" for g in ("dataset", "model", "framework",
                                                                      "engine")},
    "chunks": "config chunks (micro-batches per step)",
    "halo": "config microbatch.halo", "partition": "config microbatch.partition",
    "fanouts": "config microbatch.fanouts joined by ',' (sampled halos; None otherwise)",
    "evaluation": "how every epoch evaluated, the record's microbatch.evaluation: plan (the halo mode's "
                  "micro-batches) or layerwise; older records: layerwise with historical halos, else plan",
    "targets": "config microbatch.targets, else 'train' (older records; None without a config)",
    "seed": "config train.seed",
    "epochs": "epochs completed (len of the record's epochs, NaN without a record; requested: "
              "cfg.train.epochs)",
    "monitor": "config train.monitor (older records: val_acc), what picks the best epoch: val_acc "
               "(highest validation accuracy) or val_loss (lowest validation loss)",
    "test_acc": "final test accuracy (last epoch)",
    "val_acc": "final validation accuracy (last epoch)",
    "best_val_acc": "validation accuracy at the best epoch (with val_acc: the best over epochs)",
    "best_val_loss": "validation loss at the best epoch (NaN in records older than it)",
    "test_acc_at_best_val": "test accuracy at the best epoch (the first with the best train.monitor)",
    "best_epoch": "first epoch with the best train.monitor",
    "stopped_epoch": "last epoch when train.patience stopped the run early (NaN: ran every epoch)",
    "tta_train_s": "time to accuracy: training seconds (steps only) until validation accuracy first "
                   "reached tta_target_val_acc (NaN: never)",
    "tta_wall_s": "time to accuracy: wall seconds from the run's start (set-up, evaluations and a "
                  "pipeline's process start included) to the end of the epoch that reached it (NaN: never, "
                  "or before a resume)",
    "tta_epoch": "epoch at which validation accuracy first reached tta_target_val_acc",
    "tta_target_val_acc": "the target: train.target_val_acc, else 0.98 x the run's best",
    "best_train_s": "time to the best epoch (by train.monitor): training seconds (steps only)",
    "best_wall_s": "time to the best epoch: wall seconds from the run's start, as tta_wall_s",
    "epoch_time_median_s": "median training-step time after the warm-up epoch",
    "eval_time_median_s": "median evaluation time after the warm-up epoch",
    "setup_s": "graph loading and model building", "microbatch_build_s": "building the micro-batch plans",
    "total_s": "whole run",
    "peak_rss_mb": "peak resident memory (VmHWM), MiB; of the largest rank for engine=pipelining",
    "peak_rss_total_mb": "peak resident memory of the run's processes together, MiB: for engine=pipelining "
                         "each rank's VmHWM and the launcher's, summed (at most that: the peaks need not "
                         "coincide); else peak_rss_mb",
    "peak_device_mb": "peak CUDA memory, MiB, max over devices (NaN on CPU)",
    "replication": "training plan: rows read over distinct rows",
    "inflation": "training plan: work relative to one micro-batch",
    "cut_edge_fraction": "training plan: edges joining different parts",
    "padding_fraction": "training plan: padding a static-shape layout would need",
    "node_balance": "training plan: max / mean input rows per micro-batch",
    "num_nodes": "graph nodes", "num_edges": "graph edges",
    "devices": "engine.devices joined by ',' (or engine.device)",
    "git_sha": "source commit of the run (-dirty when modified)",
    "parameters": "model parameters",
    "hardware": "the GPU model(s) of the run's process, else its CPU model",
    "date": "day the run started (UTC, from the record's env.date)",
    "pipeline_schedule": "pipeline schedule: single | gpipe | 1f1b | interleaved1f1b",
    "pipeline_stages": "pipeline stages", "pipeline_balance": "units per stage joined by ',' (e.g. 1,3)",
    "pipeline_balance_source": "where the balance came from: auto (measured) | config | even",
    "pipeline_overlap": "whether two stages can run at the same time at all (False: one after another)",
    "pipeline_bubble_theoretical": "idle share of the schedule with perfectly balanced stages",
    "pipeline_bubble": "measured idle share: 1 - busy / (lanes x makespan)",
    "pipeline_bubble_ideal": "idle share of the ideal makespan: the schedule's bubble plus the imbalance's",
    "pipeline_makespan_s": "first box's start to last box's end of a training step",
    "pipeline_busy_s": "forward + backward + recompute seconds of all stages per step",
    "pipeline_communication_s": "seconds stages waited on receives per step (pipelining)",
    "pipeline_imbalance": "max / mean busy time over stages (1 = balanced)",
    "pipeline_ideal_makespan_s": "what the schedule would take with the measured busy times only",
    "pipeline_ideal_speedup": "busy / ideal makespan: the best this pipeline could gain (1: no overlap)",
}
#: Columns that are None, not NaN, when missing (text, and the overlap flag).
_TEXT = {"path", "status", "error", "dataset", "model", "framework", "engine", "halo", "partition", "fanouts",
         "evaluation",
         "targets", "devices", "git_sha", "hardware", "date", "pipeline_schedule", "pipeline_balance",
         "pipeline_balance_source", "pipeline_overlap"}
_PIPELINE_FIGURES = ("bubble_theoretical", "bubble", "bubble_ideal", "makespan_s", "busy_s",
                     "communication_s", "imbalance", "ideal_makespan_s", "ideal_speedup")
_MIB = 2 ** 20


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _get(d: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(d, Mapping) or key not in d:
            return None
        d = d[key]
    return d


def _number(value: Any) -> Any:
    """``value`` if it is a number, else NaN."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _leaf(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        if all(v is None or isinstance(v, (str, int, float, bool)) for v in value):
            return ",".join(str(v) for v in value)
        return json.dumps(value, default=str)
    return value


def _leaves(d: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = _leaf(value)
    return out


def flatten(record: RunRecord | Mapping[str, Any], path: str | Path | None = None) -> dict[str, Any]:
    """One flat row of a record (a JSON value is read by
    [`from_dict`][pipegnn.run_record.RunRecord.from_dict], whose RecordFormatError it raises): the `COLUMNS`
    (NaN or None when the record lacks them, as failed and invalid runs do), ``pipeline_stage<s>_busy_s`` for
    every stage of its ``pipeline`` section, then ``cfg.<dotted key>`` for every config leaf."""
    record = record if isinstance(record, RunRecord) else RunRecord.from_dict(record, path)
    cfg, choices, final, timing, mb, memory = (record.config, record.choices, record.final, record.timing,
                                               record.microbatch, record.memory)
    env, dataset, pipeline = record.env, record.dataset or {}, record.pipeline or {}
    engine = _dict(cfg.get("engine"))
    devices = engine.get("devices")
    device_peaks = [b for b in (memory.get("peak_device_bytes") or {}).values() if not math.isnan(_number(b))]
    rss = _number(memory.get("peak_rss_bytes"))
    ranks = memory.get("peak_rss_bytes_per_rank")
    total = (sum(map(_number, ranks)) + _number(memory.get("launcher_peak_rss_bytes", 0))
             if isinstance(ranks, list) and ranks else rss)
    targets = _get(cfg, "microbatch", "targets") or mb.get("targets")
    tta, best = _dict(final.get("time_to_accuracy")), _dict(final.get("time_to_best"))
    fanouts = _get(cfg, "microbatch", "fanouts")
    row: dict[str, Any] = {
        "path": None if path is None else str(path),
        "status": Status(record.status).value,
        "error": record.error.strip().split("\n", 1)[0] if record.error else None,
        **{g: choices.get(g) or _get(cfg, g, "name") for g in ("dataset", "model", "framework", "engine")},
        "chunks": cfg.get("chunks", mb.get("chunks")),
        "halo": _get(cfg, "microbatch", "halo") or mb.get("halo"),
        "partition": _get(cfg, "microbatch", "partition") or mb.get("partition"),
        "fanouts": _leaf(fanouts) if fanouts is not None else None,
        "evaluation": mb.get("evaluation") or (
            None if not mb else "layerwise" if mb.get("halo") == "historical" else "plan"),
        "targets": _leaf(targets) if targets is not None else ("train" if cfg else None),  # older records
        "seed": _get(cfg, "train", "seed"),
        "epochs": len(record.epochs),
        "monitor": _get(cfg, "train", "monitor") or ("val_acc" if cfg else None),
        **{k: _number(final.get(k)) for k in ("test_acc", "val_acc", "best_val_acc", "best_val_loss",
                                              "test_acc_at_best_val", "best_epoch", "stopped_epoch")},
        **{f"tta_{k}": _number(tta.get(k)) for k in ("train_s", "wall_s", "epoch", "target_val_acc")},
        **{f"best_{k}": _number(best.get(k)) for k in ("train_s", "wall_s")},
        **{k: _number(timing.get(k)) for k in ("epoch_time_median_s", "eval_time_median_s", "setup_s",
                                                "microbatch_build_s", "total_s")},
        "peak_rss_mb": rss / _MIB,
        "peak_rss_total_mb": total / _MIB,
        "peak_device_mb": max(device_peaks) / _MIB if device_peaks else math.nan,
        **{k: _number(mb.get(k)) for k in ("replication", "inflation", "cut_edge_fraction",
                                            "padding_fraction", "node_balance")},
        "num_nodes": _number(dataset.get("num_nodes")),
        "num_edges": _number(dataset.get("num_edges")),
        "devices": _leaf(devices) if devices is not None else engine.get("device"),
        "git_sha": env.get("git_sha"),
        "parameters": _number((record.model or {}).get("parameters")),
        "hardware": _hardware(env),
        "date": str(env.get("date") or "")[:10] or None,
        "pipeline_schedule": pipeline.get("schedule"),
        "pipeline_stages": _number(pipeline.get("num_stages")),
        "pipeline_balance": _leaf(pipeline["balance"]) if "balance" in pipeline else None,
        "pipeline_balance_source": pipeline.get("balance_source"),
        "pipeline_overlap": pipeline.get("overlap_possible"),
        **{f"pipeline_{k}": _number(pipeline.get(k)) for k in _PIPELINE_FIGURES},
    }
    for key, value in row.items():
        if value is None and key not in _TEXT:
            row[key] = math.nan
    for s, stage in enumerate(pipeline.get("stages") or []):
        row[f"pipeline_stage{s}_busy_s"] = _number(stage.get("busy_s"))
    row.update(_leaves(cfg, "cfg."))
    return row


def integers(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its `INTEGER_COLUMNS` (those it has, holding whole numbers only) as pandas'
    nullable integers, so that a CSV says ``2``, not ``2.0`` (and nothing where unknown)."""
    table = table.copy()
    for name in INTEGER_COLUMNS:
        known = table[name].dropna() if name in table else ()
        if len(known) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                              and float(v).is_integer() for v in known):
            table[name] = table[name].astype("Float64").astype("Int64")
    return table


def _hardware(env: Mapping[str, Any]) -> str | None:
    gpus = env.get("gpus")
    if isinstance(gpus, list) and gpus:  # counted once each (20,000 names: a count per name was quadratic)
        counts = Counter(map(str, gpus))
        return ", ".join(f"{counts[n]}x {n}" for n in sorted(counts))
    return env.get("cpu") or None
