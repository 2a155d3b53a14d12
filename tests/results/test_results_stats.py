"""Statistics of the runs table (pipegnn/results/stats.py): status counts, summaries over seeds, ratios to a
baseline, the derived setup columns, the leaderboard."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipegnn.results.__main__ import main
from pipegnn.results.stats import device_type, leaderboard, relative, setup_label, summarize, summary
from pipegnn.results.table import load
from pipegnn.runs.record_writes import write_record

from tests.helpers import make_frame, make_record, seeded_record


def test_summary_counts_runs_by_status(records_sweep: Path) -> None:
    df = load(records_sweep)
    assert summary(df) == "3 runs: 1 completed, 1 failed, 1 invalid"
    assert summary(df[:1]) == "1 run: 1 completed"


def test_summarize_mean_std_count_over_seeds_and_dropped_runs() -> None:
    df = make_frame(make_record(halo="exact", chunks=2, seed=0, test_acc=0.7),
               make_record(halo="exact", chunks=2, seed=1, test_acc=0.8),
               make_record(halo="exact", chunks=2, seed=2, test_acc=0.9),
               make_record(halo="exact", chunks=2, seed=3, status="failed", test_acc=0.1),
               make_record(halo="none", chunks=2, seed=0, test_acc=0.5),
               make_record(halo="none", chunks=2, seed=1, status="invalid"),
               make_record(halo="none", chunks=2, seed=2, status="failed"),
               make_record(halo="none", chunks=4, seed=0),  # completed without an accuracy
               make_record(halo="none", chunks=4, seed=1, test_acc=0.25))
    out = summarize(df, ["halo", "chunks"], ["test_acc"])
    assert list(out.columns) == ["halo", "chunks", "runs", "test_acc_mean", "test_acc_std", "test_acc_count"]
    assert list(zip(out["halo"], out["chunks"])) == [("exact", 2), ("none", 2), ("none", 4)]
    assert list(out["runs"]) == [3, 1, 2] and list(out["test_acc_count"]) == [3, 1, 1]
    assert out["test_acc_mean"].tolist() == pytest.approx([0.8, 0.5, 0.25])
    assert out.loc[0, "test_acc_std"] == pytest.approx(0.1)  # sample std: sqrt((0.01 + 0 + 0.01) / 2)
    assert math.isnan(out.loc[1, "test_acc_std"]) and math.isnan(out.loc[2, "test_acc_std"])
    assert out.attrs["dropped"] == 3 and out.attrs["dropped_by_status"] == {"failed": 2, "invalid": 1}


def test_summarize_keys_metrics_and_derived_columns() -> None:
    df = make_frame(make_record(devices="cpu2", hidden=8, epoch_time_median_s=0.5, rss_mb=100.0),
               make_record(devices="cpu2", hidden=8, seed=1, epoch_time_median_s=1.5, rss_mb=300.0),
               make_record(devices="cpu", hidden=16, epoch_time_median_s=2.0, rss_mb=50.0))
    out = summarize(df, ["setup", "model.hidden"], ["epoch_time_median_s", "peak_rss_mb"])
    assert list(out["setup"]) == ["gpipe 2×cpu", "single cpu"] and list(out["cfg.model.hidden"]) == [8, 16]
    assert out["epoch_time_median_s_mean"].tolist() == [1.0, 2.0]
    assert out["peak_rss_mb_mean"].tolist() == [200.0, 50.0]
    assert out.loc[0, "peak_rss_mb_std"] == pytest.approx(math.sqrt(2) * 100)
    assert out.attrs["dropped"] == 0 and out.attrs["dropped_by_status"] == {}
    only_failed = summarize(make_frame(make_record(status="failed"), make_record(status="oom")),
                            "halo", "test_acc")
    assert only_failed.empty and only_failed.attrs["dropped_by_status"] == {"failed": 1, "oom": 1}
    with pytest.raises(KeyError, match="colour"):
        summarize(df, "colour", "test_acc")


def test_relative_to_full_batch_single_device_within_groups() -> None:
    base = {"chunks": 1, "halo": "none", "engine": "single"}
    records = [
        make_record(framework="pyg", devices="cpu", chunks=1, halo="none", seed=0, epoch_time_median_s=0.25),
        make_record(framework="pyg", devices="cpu", chunks=1, halo="none", seed=1, epoch_time_median_s=0.75),
        make_record(framework="pyg", devices="cpu2", chunks=4, halo="exact", epoch_time_median_s=1.5),
        make_record(framework="pyg", devices="cpu2", chunks=8, halo="none", epoch_time_median_s=0.125),
        make_record(framework="dgl", devices="cpu", chunks=1, halo="none", epoch_time_median_s=2.0),
        make_record(framework="dgl", devices="cpu2", chunks=4, halo="exact", epoch_time_median_s=3.0),
        make_record(framework="pyg", devices="gpu", chunks=1, halo="none", epoch_time_median_s=0.0625),
        make_record(framework="pyg", devices="gpu2", chunks=4, halo="exact", epoch_time_median_s=0.25),
        make_record(framework="pyg", devices="cpu2", chunks=4, halo="exact", dataset="citeseer",
                    num_nodes=3327, epoch_time_median_s=1.0),  # no baseline for citeseer
        make_record(framework="pyg", devices="cpu2", chunks=4, halo="exact", status="failed"),
    ]
    index = [10 * i for i in range(len(records))]
    out = relative(make_frame(*records, index=index), "epoch_time_median_s", base)
    assert out.name == "epoch_time_median_s_relative" and list(out.index) == index
    # pyg/cpu baseline = mean of its two seeds = 0.5; dgl/cpu = 2.0; pyg/cuda = 0.0625
    expected = [0.5, 1.5, 3.0, 0.25, 1.0, 1.5, 1.0, 4.0, math.nan, math.nan]
    np.testing.assert_array_equal(out.to_numpy(), expected)


def test_relative_ambiguous_baseline_and_custom_within() -> None:
    df = make_frame(make_record(devices="cpu", chunks=1, halo="none", epoch_time_median_s=1.0),
               make_record(devices="cpu2", chunks=1, halo="none", epoch_time_median_s=2.0),
               make_record(devices="cpu2", chunks=4, halo="exact", epoch_time_median_s=6.0))
    with pytest.raises(ValueError, match="engine"):
        relative(df, "epoch_time_median_s", {"chunks": 1, "halo": "none"})
    # within the same setup (engine and devices), the gpipe rows compare with gpipe's full batch
    out = relative(df, "epoch_time_median_s", {"chunks": 1, "halo": "none"},
                   within=("dataset", "model", "framework", "setup"))
    assert out.tolist() == [1.0, 1.0, 3.0]


def test_setup_label_and_device_type() -> None:
    assert setup_label("gpipe", "cpu,cpu") == "gpipe 2×cpu"
    assert setup_label("single", "cuda:0") == "single cuda"
    assert setup_label("pipelining", "cuda:0,cuda:1,cuda:2,cuda:3") == "pipelining 4×cuda"
    assert setup_label("single", None) == "single" and device_type(float("nan")) is None
    assert device_type("cuda:0,cpu") == "cpu+cuda" and device_type("cpu") == "cpu"


def test_leaderboard_mean_std_over_seeds(tmp_path: Path) -> None:
    for i, (seed, test, val, chunks) in enumerate([(0, 0.80, 0.78, 8), (1, 0.82, 0.80, 8), (2, 0.84, 0.79, 8),
                                                    (0, 0.70, 0.71, 1)]):
        write_record(tmp_path / str(i), seeded_record(seed, test, val, chunks))
    write_record(tmp_path / "4", {**seeded_record(3, 0.1, 0.1), "status": "failed"})  # not in the table
    board = leaderboard(load(tmp_path))
    assert list(board["chunks"]) == [1, 8]
    row = board.iloc[1]
    assert (row["runs"], row["seeds"], row["parameters"]) == (3, 3, 92373)
    assert row["test_mean"] == pytest.approx(0.82) and row["test_std"] == pytest.approx(0.02)
    assert row["test"] == "82.00 ± 2.00" and row["val"] == "79.00 ± 1.00"
    assert row["hardware"] == "Some CPU" and row["date"] == "2026-11-22"
    assert board.iloc[0]["test"] == "70.00"  # one run: no spread to show
    assert main([str(tmp_path), "--table", "--csv", str(tmp_path / "board.csv")]) == 1  # a failed run
    assert list(pd.read_csv(tmp_path / "board.csv")["test"]) == ["70.00", "82.00 ± 2.00"]


def test_leaderboard_keeps_the_monitors_apart(tmp_path: Path) -> None:
    """The same setting picked by validation accuracy and by validation loss is two rows (records
    older than train.monitor count as val_acc)."""
    for i, (seed, test, monitor) in enumerate([(0, 0.80, None), (1, 0.82, "val_acc"), (0, 0.85, "val_loss")]):
        record = seeded_record(seed, test, 0.8)
        if monitor is not None:
            record["config"]["train"]["monitor"] = monitor
        write_record(tmp_path / str(i), record)
    board = leaderboard(load(tmp_path))
    assert list(board["monitor"]) == ["val_acc", "val_loss"]
    assert list(board["runs"]) == [2, 1] and list(board["test"]) == ["81.00 ± 1.41", "85.00"]
