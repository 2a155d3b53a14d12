"""The command line, ``python -m pipegnn.results`` (pipegnn/results/__main__.py): table, filters, CSV and
Parquet, exit codes, the line naming a sweep's jobs without a record."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pipegnn.results.__main__ import _arrow_safe, _parse_value, main
from pipegnn.results.table import load
from pipegnn.runs.record_writes import write_record

from tests.helpers import COMPLETED_RECORD, RECORD_CONFIG, ROOT, killed_model_sweep, results_cli


def test_cli(records_sweep: Path, tmp_path: Path) -> None:
    proc = results_cli(records_sweep.parent.parent, "--csv", tmp_path / "all.csv")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["dataset", "model"] and len(lines) == 5
    assert lines[1].split()[-5:] == ["completed", "0.82", "0.0125", "300", "2.25"]  # at best val
    assert lines[-1] == "3 runs: 1 completed, 1 failed, 1 invalid"
    assert f"failed: {records_sweep / '1' / 'result.json'}: RuntimeError: boom" in proc.stderr
    assert list(pd.read_csv(tmp_path / "all.csv")["status"]) == ["completed", "failed", "invalid"]

    parquet = importlib.util.find_spec("pyarrow") is not None
    extra = ["--parquet", tmp_path / "one.parquet"] if parquet else []
    proc = results_cli(records_sweep, "--where", "chunks=8", "halo=exact",
                       "--columns", "status,chunks,model.hidden", *extra)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["status     chunks  model.hidden", "completed       8             8",
                                        "1 run: 1 completed"]
    if parquet:
        back = pd.read_parquet(tmp_path / "one.parquet")
        expected = load(records_sweep, where={"chunks": 8})
        assert list(back.columns) == list(expected.columns)
        assert back.loc[0, "test_acc"] == 0.815 and back.loc[0, "cfg.engine.balance"] == "1,1"
        assert back.loc[0, "peak_device_mb"] == 96.0

    (tmp_path / "empty").mkdir()
    proc = results_cli(tmp_path / "empty")
    assert proc.returncode == 2 and "no result.json found under" in proc.stderr and proc.stdout == ""


def test_parquet_round_trip_with_mixed_records(records_sweep: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    mixed = {**COMPLETED_RECORD, "config": {**RECORD_CONFIG, "chunks": "eight"}}  # int and str mixed
    write_record(records_sweep / "3", mixed)
    df = load(records_sweep)
    _arrow_safe(df).to_parquet(tmp_path / "runs.parquet", index=False)
    back = pd.read_parquet(tmp_path / "runs.parquet")
    assert list(back["status"]) == ["completed", "failed", "invalid", "completed"]
    assert list(back["chunks"]) == ["8", "4", "0", "eight"]
    pd.testing.assert_series_equal(back["test_acc"], df["test_acc"])


def test_main_in_process(records_sweep: Path, capsys: pytest.CaptureFixture) -> None:
    assert [_parse_value(v) for v in ("8", "-2", "0.5", "1e-3", "True", "none", "exact", "1,1", "nan")] == \
        [8, -2, 0.5, 0.001, True, None, "exact", "1,1", "nan"]
    # directories may follow --where; repeating a key accepts any of its values
    assert main(["--where", "chunks=8", "chunks=4", str(records_sweep), "--columns", "chunks,status"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == ["chunks  status", "     8  completed", "     4  failed", "2 runs: 1 completed, 1 failed"]
    assert main([str(records_sweep), "--where", "train.epochs=3", "engine=single",
                 "--columns", "chunks"]) == 1
    assert capsys.readouterr().out.splitlines()[1:] == ["     4", "1 run: 0 completed, 1 failed"]
    assert main([str(records_sweep), "--where", "chunks=3"]) == 2
    assert "none of the 3 runs matches --where chunks=3" in capsys.readouterr().err
    assert main([str(records_sweep), "--columns", "chunks,colour"]) == 2
    assert "no column 'colour'" in capsys.readouterr().err
    assert main([str(records_sweep / "missing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_cli_fails_on_a_killed_sweep(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = killed_model_sweep(tmp_path / "sweep")
    proc = results_cli(sweep, "--columns", "model,chunks,status")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == ["model  chunks  status", "gat         2  completed",
                                        "gcn         2  incomplete", "gat         8  completed",
                                        "gcn         8  missing",
                                        "4 runs: 2 completed, 1 incomplete, 1 missing"]
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"error: sweep not finished: 2 of 4 runs have no result.json (1 incomplete, 1 missing): "
                    f"{sweep / '1'}, {sweep / '3'}")
    assert f"missing: {sweep / '3' / 'result.json'}: never started" in proc.stderr
    # the runs a filter keeps all completed, yet the sweep is not finished: still an error
    assert main([str(sweep), "--where", "status=completed", "--columns", "chunks"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "2 runs: 2 completed"
    assert "2 of 4 runs have no result.json (1 incomplete, 1 missing; 2 not matching --where)" in err
    # every job recorded: exit 0 and no such line
    write_record(sweep / "1", COMPLETED_RECORD)
    write_record(sweep / "3", COMPLETED_RECORD)
    assert main([str(sweep)]) == 0
    assert "sweep not finished" not in capsys.readouterr().err


#: Content that no JSON reader may turn into anything but a clear error naming the file.
DAMAGED_JSON = {"truncated": b'{"status": "completed", "epo', "empty": b"", "binary": bytes(range(256)),
                "nested": b"[" * 100_000 + b"]" * 100_000}


@pytest.mark.parametrize("damage", list(DAMAGED_JSON))
def test_a_damaged_record_is_named_and_fails_the_table(tmp_path: Path, damage: str,
                                                       capsys: pytest.CaptureFixture) -> None:
    """A sweep job whose result.json is damaged (nesting too deep for the parser included, which raised
    an uncaught RecursionError and lost the whole table): the table still lists every job, that one as
    unreadable, and the exit status is 1 with a line naming the file."""
    sweep = killed_model_sweep(tmp_path / "sweep")
    write_record(sweep / "1", COMPLETED_RECORD)
    write_record(sweep / "3", COMPLETED_RECORD)
    (sweep / "2" / "result.json").write_bytes(DAMAGED_JSON[damage])
    assert main([str(sweep), "--columns", "chunks,status"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "4 runs: 3 completed, 1 unreadable"
    assert f"unreadable: {sweep / '2' / 'result.json'}: " in err


@pytest.mark.parametrize("cut", ["  sweeper:", "basic_sweeper.",
                                 "overrides:\n    hydra:\n    - hydra.sweep.dir=/"])
def test_a_damaged_sweep_plan_is_an_error_not_no_plan(tmp_path: Path, cut: str,
                                                      capsys: pytest.CaptureFixture) -> None:
    """multirun.yaml cut short (before its sweeper, inside the sweeper's name, inside its overrides) and
    the folders of the jobs after the first deleted: without the plan the missing jobs cannot be named,
    so the table says the plan is damaged and exits 1 (it used to report "1 run: 1 completed" and exit
    0); report.py likewise."""
    sweep = killed_model_sweep(tmp_path / "sweep")
    for job in ("1", "2", "3"):
        shutil.rmtree(sweep / job, ignore_errors=True)
    marker = sweep / "multirun.yaml"
    text = marker.read_text()
    marker.write_text(text[:text.index(cut) + len(cut) - 1] + "\n  x: [")
    assert main([str(sweep), "--columns", "chunks,status"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "2 runs: 1 completed, 1 unreadable"
    assert f"unreadable: {marker}: " in err and "missing jobs cannot be named" in err
    spec = importlib.util.spec_from_file_location("report", ROOT / "experiments" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    assert report.main([str(tmp_path), str(tmp_path / "out")]) == 1
    assert f"unreadable: {marker}: " in capsys.readouterr().err


def test_table_figure_with_a_published_reference(records_sweep: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    """--table --figure draws the table; --reference takes DATASET=MEAN,STD; both need --table."""
    figure = tmp_path / "table.png"
    assert main([str(records_sweep), "--table", "--figure", str(figure), "--reference", "cora=85.5,0.5"]) == 1
    assert f"wrote {figure}" in capsys.readouterr().out and figure.stat().st_size > 5_000
    for bad, message in ((["--figure", str(figure)], "give --table too"),
                         (["--table", "--reference", "cora=85.5"], "give DATASET=MEAN,STD in percent")):
        with pytest.raises(SystemExit) as exit_:
            main([str(records_sweep), *bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err



def test_table_of_runs_none_completed_lists_the_runs(records_sweep: Path) -> None:
    """--table over runs none of which completed shows the runs (their settings and status), not a row
    of dashes, and says why."""
    (records_sweep / "0" / "result.json").unlink()  # the completed one: left, a failed and an invalid run
    proc = results_cli(records_sweep, "--table")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["dataset", "model"] and "status" in lines[0].split()
    assert {line.split()[lines[0].split().index("status")] for line in lines[1:3]} == {"failed", "invalid"}
    assert "none of the 2 runs completed" in proc.stderr
