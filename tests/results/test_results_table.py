"""The runs table (pipegnn/results/table.py): flatten, load/select, unreadable and malformed records, jobs
that left no record, CSV, the text table."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
import pytest

from pipegnn import run
from pipegnn.results.rows import COLUMNS, flatten
from pipegnn.results.stats import summary
from pipegnn.results.table import format_table, load, select
from pipegnn.run_record import RecordFormatError
from pipegnn.runs.record_writes import write_record

from tests.helpers import (
    COMPLETED_RECORD,
    RECORD_CONFIG,
    failed_record,
    invalid_record,
    killed_model_sweep,
    make_cfg,
    results_cli,
    seeded_record,
)

#: A record's ``pipeline`` section (shaped like pipegnn.training.launch's: static info, then medians over
#: epochs).
PIPELINE = {
    "engine": "pipelining", "schedule": "1f1b", "chunks": 8, "stage_units": [["transform0"], ["propagate0",
    "transform1", "propagate1"]], "lanes": [0, 1], "devices": ["rank0:cpu", "rank1:cpu"],
    "overlap_possible": True, "overlap_note": None, "balance_source": "auto",
    "unit_costs_s": {"transform0": 0.003, "propagate0": 0.0015, "transform1": 0.0003, "propagate1": 0.0008},
    "per_lane": 1, "num_stages": 2, "num_lanes": 2, "balance": [1, 3], "bubble_theoretical": 1 / 9,
    "timeline": True, "makespan_s": 0.032, "busy_s": 0.028, "communication_s": 0.022, "bubble": 0.5625,
    "imbalance": 1.0625, "ideal_makespan_s": 0.018, "ideal_speedup": 1.5,
    "stages": [{"forward_s": 0.012, "backward_s": 0.002, "recompute_s": 0.0, "communication_s": 0.008,
                "busy_s": 0.014},
               {"forward_s": 0.009, "backward_s": 0.005, "recompute_s": 0.0, "communication_s": 0.014,
                "busy_s": 0.0145}],
    "trace": "trace.json",
}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One record of a real (tiny) run."""
    tmp = tmp_path_factory.mktemp("real")
    out = tmp / "run"
    # ++ sets the cache root (dataset copies, cached plans) whether or not the config has the key
    record = run(make_cfg("train.epochs=2", "chunks=2", f"++cache_root={tmp / 'cache'}"), output_dir=out)
    assert record["status"] == "completed", record["error"]
    return out, record


def test_flatten_hand_made_record() -> None:
    row = flatten(COMPLETED_RECORD, path="x/result.json")
    assert list(row)[:len(COLUMNS)] == list(COLUMNS)
    assert row["path"] == "x/result.json" and row["status"] == "completed" and row["error"] is None
    assert (row["dataset"], row["model"], row["framework"], row["engine"]) == ("cora", "gat", "pyg", "gpipe")
    assert (row["chunks"], row["halo"], row["partition"], row["targets"], row["seed"], row["epochs"]) == \
        (8, "exact", "metis", "train", 1, 3)
    assert (row["test_acc"], row["val_acc"], row["best_val_acc"], row["test_acc_at_best_val"]) == \
        (0.815, 0.79, 0.8, 0.82)
    assert (row["epoch_time_median_s"], row["eval_time_median_s"], row["setup_s"],
            row["microbatch_build_s"], row["total_s"]) == (0.0125, 0.004, 1.5, 0.25, 9.0)
    assert row["peak_rss_mb"] == 300.0 and row["peak_device_mb"] == 96.0
    assert (row["replication"], row["inflation"], row["cut_edge_fraction"], row["padding_fraction"],
            row["node_balance"]) == (1.5, 2.25, 0.1, 0.05, 1.2)
    assert (row["num_nodes"], row["num_edges"], row["devices"], row["git_sha"]) == \
        (2708, 10556, "cuda:0,cuda:1", "abc123")
    assert row["cfg.model.hidden"] == 8 and row["cfg.train.lr"] == 0.005 and row["cfg.data.root"] is None
    assert row["cfg.engine.balance"] == "1,1" and row["cfg.engine.devices"] == "cuda:0,cuda:1"
    assert not any(k.startswith("cfg.") and isinstance(v, dict) for k, v in row.items())


def test_flatten_missing_fields_and_fallbacks() -> None:
    row = flatten(failed_record())
    assert row["error"] == "RuntimeError: boom"
    assert (row["dataset"], row["engine"], row["devices"]) == ("cora", "single", "cpu")  # from config
    assert row["epochs"] == 1 and row["total_s"] == 2.0 and row["peak_rss_mb"] == 1.0
    for key in ("test_acc", "best_val_acc", "epoch_time_median_s", "setup_s", "peak_device_mb",
                "inflation", "num_nodes"):
        assert math.isnan(row[key]), key
    assert row["git_sha"] is None
    cfg = copy.deepcopy(RECORD_CONFIG)
    cfg["microbatch"]["targets"] = "val"
    assert flatten({"status": "failed", "config": cfg})["targets"] == "val"
    assert flatten({"status": "failed", "microbatch": {"targets": "all"}})["targets"] == "all"  # plan summary
    empty = flatten({"status": "failed"})  # a version-1 record with nothing but its status still flattens
    assert empty["status"] == "failed" and empty["epochs"] == 0 and math.isnan(empty["chunks"])
    with pytest.raises(RecordFormatError, match="^malformed record: no 'status'$"):
        flatten({})
    assert math.isnan(flatten(invalid_record())["peak_rss_mb"])


def test_flatten_pipeline_section_and_older_records_without_it() -> None:
    row = flatten({**COMPLETED_RECORD, "pipeline": PIPELINE})
    assert (row["pipeline_schedule"], row["pipeline_stages"], row["pipeline_balance"],
            row["pipeline_balance_source"], row["pipeline_overlap"]) == ("1f1b", 2, "1,3", "auto", True)
    assert (row["pipeline_bubble_theoretical"], row["pipeline_bubble"], row["pipeline_makespan_s"],
            row["pipeline_busy_s"], row["pipeline_communication_s"], row["pipeline_imbalance"],
            row["pipeline_ideal_makespan_s"], row["pipeline_ideal_speedup"]) == \
        (1 / 9, 0.5625, 0.032, 0.028, 0.022, 1.0625, 0.018, 1.5)
    assert (row["pipeline_stage0_busy_s"], row["pipeline_stage1_busy_s"]) == (0.014, 0.0145)
    assert list(row)[len(COLUMNS):len(COLUMNS) + 3] == ["pipeline_stage0_busy_s", "pipeline_stage1_busy_s",
                                                         "cfg.chunks"]
    old = flatten(COMPLETED_RECORD)  # written before stage timelines
    pipeline = [k for k in COLUMNS if k.startswith("pipeline_")]
    assert len(pipeline) == 14
    for key in pipeline:
        value = old[key]
        assert value is None if key in ("pipeline_schedule", "pipeline_balance", "pipeline_balance_source",
                                         "pipeline_overlap") else math.isnan(value), key
    assert "pipeline_stage0_busy_s" not in old
    no_timeline = {k: v for k, v in PIPELINE.items() if k not in ("makespan_s", "bubble", "stages")}
    row = flatten({**COMPLETED_RECORD, "pipeline": {**no_timeline, "timeline": False}})
    assert row["pipeline_balance"] == "1,3" and math.isnan(row["pipeline_bubble"])


def test_load_stage_columns_in_stage_order(tmp_path: Path) -> None:
    stages = [{**PIPELINE["stages"][0], "busy_s": float(s)} for s in range(11)]
    pipeline = {**PIPELINE, "num_stages": 11, "stages": stages}
    write_record(tmp_path / "0", {**COMPLETED_RECORD, "pipeline": pipeline})
    write_record(tmp_path / "1", COMPLETED_RECORD)
    df = load(tmp_path)
    extra = list(df.columns[len(COLUMNS):])
    assert extra[:11] == [f"pipeline_stage{s}_busy_s" for s in range(11)]
    assert all(c.startswith("cfg.") for c in extra[11:])
    assert list(df["pipeline_stage10_busy_s"].fillna(-1)) == [10.0, -1]
    assert list(df["pipeline_stages"].fillna(-1)) == [11, -1]


def test_load_one_row_per_record(records_sweep: Path) -> None:
    df = load(records_sweep)
    assert list(df["status"]) == ["completed", "failed", "invalid"]
    assert list(df.columns[:len(COLUMNS)]) == list(COLUMNS)
    assert list(df["path"]) == [str(records_sweep / j / "result.json") for j in ("0", "1", "2")]
    assert list(df["chunks"]) == [8, 4, 0] and list(df["cfg.model.hidden"]) == [8, 16, 8]
    assert df.loc[0, "test_acc"] == 0.815 and df.loc[[1, 2], "test_acc"].isna().all()
    assert df.loc[1, "error"] == "RuntimeError: boom" and pd.isna(df.loc[0, "error"])
    assert list(df["engine"]) == ["gpipe", "single", "gpipe"]
    # several roots, the same root twice counted once
    assert len(load([records_sweep / "0", records_sweep, records_sweep / "2"])) == 3


def test_load_where(records_sweep: Path) -> None:
    assert list(load(records_sweep, where={"chunks": 8})["status"]) == ["completed"]
    assert list(load(records_sweep, where={"status": ["failed", "invalid"]})["chunks"]) == [4, 0]
    assert list(load(records_sweep, where={"model.hidden": 8, "halo": "exact"})["chunks"]) == [8, 0]
    assert list(load(records_sweep, where={"test_acc": None})["status"]) == ["failed", "invalid"]
    assert load(records_sweep, where={"chunks": 3}).empty
    with pytest.raises(KeyError, match="no column 'colour'"):
        load(records_sweep, where={"colour": "red"})
    assert list(select(load(records_sweep), {"engine": "single"})["chunks"]) == [4]


def test_unreadable_record_and_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "result.json").write_text("{not json")
    df = load(tmp_path)
    assert list(df["status"]) == ["unreadable"] and df.loc[0, "error"].startswith("JSONDecodeError")
    assert df.loc[0, "targets"] is None  # nothing known of it (an older record with a config: train)
    (tmp_path / "empty").mkdir()
    empty = load(tmp_path / "empty")
    assert empty.empty and list(empty.columns) == list(COLUMNS)


def test_csv_round_trip(records_sweep: Path, tmp_path: Path) -> None:
    df = load(records_sweep)
    df.to_csv(tmp_path / "runs.csv", index=False)
    back = pd.read_csv(tmp_path / "runs.csv")
    assert list(back.columns) == list(df.columns)
    pd.testing.assert_series_equal(back["test_acc"], df["test_acc"])
    assert list(back["status"]) == list(df["status"]) and list(back["chunks"]) == [8, 4, 0]


def test_flatten_real_record(real: tuple[Path, dict]) -> None:
    out, record = real
    df = load(out)
    assert len(df) == 1
    row = df.iloc[0]
    cfg, final, mb = record["config"], record["final"], record["microbatch"]
    assert row["status"] == "completed" and pd.isna(row["error"])
    assert row["path"] == str(out / "result.json")
    assert (row["dataset"], row["model"], row["framework"], row["engine"]) == \
        (cfg["dataset"]["name"], cfg["model"]["name"], cfg["framework"]["name"], cfg["engine"]["name"])
    assert row["chunks"] == cfg["chunks"] == 2 and row["epochs"] == 2 == len(record["epochs"])
    mb_cfg = cfg["microbatch"]
    assert (row["halo"], row["partition"], row["targets"]) == \
        (mb_cfg["halo"], mb_cfg["partition"], mb_cfg.get("targets", "train"))
    for key in ("test_acc", "val_acc", "best_val_acc", "test_acc_at_best_val"):
        assert row[key] == final[key], key
    for key in ("epoch_time_median_s", "eval_time_median_s", "setup_s", "microbatch_build_s", "total_s"):
        assert row[key] == record["timing"][key], key
    assert row["peak_rss_mb"] == record["memory"]["peak_rss_bytes"] / 2 ** 20
    assert math.isnan(row["peak_device_mb"])  # CPU: no device peaks
    for key in ("replication", "inflation", "cut_edge_fraction", "padding_fraction", "node_balance"):
        assert row[key] == mb[key], key
    assert (row["num_nodes"], row["num_edges"]) == \
        (record["dataset"]["num_nodes"], record["dataset"]["num_edges"])
    assert row["devices"] == ",".join(cfg["engine"]["devices"]) and row["git_sha"] == record["env"]["git_sha"]
    assert row["cfg.model.hidden"] == cfg["model"]["hidden"] and row["cfg.train.seed"] == cfg["train"]["seed"]
    assert row["cfg.dataset.num_nodes"] == 400
    pipeline = record["pipeline"]
    assert row["pipeline_balance"] == ",".join(map(str, pipeline["balance"]))
    assert row["pipeline_overlap"] == pipeline["overlap_possible"]
    for key in ("bubble", "bubble_theoretical", "makespan_s", "busy_s", "imbalance", "ideal_speedup"):
        assert row[f"pipeline_{key}"] == pipeline[key], key
    assert [row[f"pipeline_stage{s}_busy_s"] for s in range(pipeline["num_stages"])] == \
        [s["busy_s"] for s in pipeline["stages"]]


def test_format_table_aligned_columns(records_sweep: Path) -> None:
    df = load(records_sweep)
    lines = format_table(df).splitlines()
    assert lines[0].split() == ["dataset", "model", "framework", "engine", "chunks", "halo", "partition",
                                "status", "test_acc_at_best_val", "epoch_time_median_s", "peak_rss_mb",
                                "inflation"]
    assert lines[1].split() == ["cora", "gat", "pyg", "gpipe", "8", "exact", "metis", "completed", "0.82",
                                "0.0125", "300", "2.25"]
    assert lines[2].split()[7:] == ["failed", "-", "-", "1", "-"]
    assert len({len(line) for line in lines[:2]}) == 1  # aligned


def test_load_lists_jobs_without_a_record(tmp_path: Path) -> None:
    sweep = killed_model_sweep(tmp_path / "sweep")
    df = load(sweep)
    assert list(df["status"]) == ["completed", "incomplete", "completed", "missing"]
    assert list(df["path"]) == [str(sweep / j / "result.json") for j in "0123"]
    # the incomplete job's settings come from its .hydra files, the missing job's from its overrides
    assert list(df["model"]) == ["gat", "gcn", "gat", "gcn"] and list(df["chunks"]) == [2, 2, 8, 8]
    assert df.loc[1, "cfg.train.lr"] == 0.005 and math.isnan(df.loc[3, "cfg.train.lr"])
    assert df.loc[1, "error"].startswith("no result.json: the job was killed")
    assert df.loc[3, "error"] == "never started: job 3 of the sweep (chunks=8 model=gcn)"
    assert math.isnan(df.loc[1, "epochs"]) and math.isnan(df.loc[3, "test_acc"])
    assert summary(df) == "4 runs: 2 completed, 1 incomplete, 1 missing"
    assert list(load(sweep, where={"status": "completed"})["path"]) == [str(sweep / j / "result.json")
                                                                      for j in "02"]
    assert list(load(sweep, jobs=False)["status"]) == ["completed", "completed"]  # records only
    # a job folder given alone, the sweep twice: each job once
    assert list(load(sweep / "1")["status"]) == ["incomplete"]
    assert len(load([sweep / "1", sweep, sweep])) == 4
    # without multirun.yaml a never-started job is not knowable; the started one still is
    other = killed_model_sweep(tmp_path / "other", planned=False)
    assert list(load(other)["status"]) == ["completed", "incomplete", "completed"]


MALFORMED = {
    "epochs_int": ({"epochs": 3}, "'epochs' is a number, expected an array"),
    "final_list": ({"final": []}, "'final' is an array, expected an object"),
    "config_text": ({"config": "x"}, "'config' is a string, expected an object"),
    "status_list": ({"status": ["completed"]}, "'status' is an array, expected a string"),
    "no_status": ({"status": None}, "'status' is null, expected a string"),
    "stages_int": ({"pipeline": {**PIPELINE, "stages": 5}},
                   "'pipeline.stages' is a number, expected an array"),
    "epoch_text": ({"epochs": ["x"]}, "'epochs' holds a string, expected objects"),
    "device_peaks": ({"memory": {"peak_device_bytes": [1]}},
                     "'memory.peak_device_bytes' is an array, expected an object"),
    "choice_list": ({"choices": {"model": ["gat"]}}, "'choices.model' is an array, expected a string"),
}


def test_malformed_records_are_flagged_and_the_rest_kept(tmp_path: Path) -> None:
    names = ["good", *MALFORMED, "array"]
    for i, name in enumerate(names):
        record = [1, 2] if name == "array" else {**COMPLETED_RECORD, **MALFORMED.get(name, ({}, ""))[0]}
        write_record(tmp_path / f"{i}_{name}", record)
    df = load(tmp_path)
    assert list(df["path"]) == [str(tmp_path / f"{i}_{n}" / "result.json") for i, n in enumerate(names)]
    assert list(df["status"]) == ["completed", *["unreadable"] * (len(names) - 1)]
    assert df.loc[0, "test_acc"] == 0.815 and df.loc[0, "model"] == "gat"  # the good record intact
    expected = [f"malformed record: {m}" for _, m in MALFORMED.values()]
    assert list(df["error"][1:]) == [*expected, "malformed record: not a JSON object but an array"]
    assert df.loc[1:, "test_acc"].isna().all()
    proc = results_cli(tmp_path, "--columns", "status,test_acc")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[1] == "completed      0.815"
    assert proc.stdout.splitlines()[-1] == f"{len(names)} runs: 1 completed, {len(names) - 1} unreadable"
    damaged = tmp_path / "1_epochs_int" / "result.json"
    assert f"unreadable: {damaged}: malformed record: 'epochs' is a number" in proc.stderr


def test_hardware_names_the_gpus() -> None:
    row = flatten(seeded_record(0, 0.8, 0.8, gpus=["NVIDIA H100", "NVIDIA H100"]))
    assert row["hardware"] == "2x NVIDIA H100" and row["date"] == "2026-11-20"
    mixed = flatten(seeded_record(0, 0.8, 0.8, gpus=["B", "A", "B", 7]))
    assert mixed["hardware"] == "1x 7, 1x A, 2x B"
    # 20,000 names (a probe's record): each counted once, not once per name (4e8 comparisons)
    many = flatten(seeded_record(0, 0.8, 0.8, gpus=[f"GPU {i}" for i in range(20_000)] * 2))
    assert many["hardware"].startswith("2x GPU 0, 2x GPU 1, 2x GPU 10, ")
    assert many["hardware"].count("2x") == 20_000
