"""experiments/report.py: records (and traces) packed into one archive, per-run and summary tables,
figures per sweep folder."""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pipegnn.results import archive, load, load_record
from pipegnn.runs.record_writes import write_record

from tests.helpers import COMMITTED_RESULTS, ROOT

RECORDS = ROOT / "tests" / "fixtures" / "records"
TIMELINE = ROOT / "tests" / "fixtures" / "timeline"  # a pipelining run with its trace.json


def _report():
    spec = importlib.util.spec_from_file_location("report", ROOT / "experiments" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_packs_records_and_writes_tables_and_figures(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    report = _report()
    sweeps = tmp_path / "multirun"
    shutil.copytree(RECORDS, sweeps)
    (sweeps / "halo" / "exact-c1-s0" / "train.log").write_text("not a record")
    out = tmp_path / "reference"
    stale = out / "halo" / "records" / "old" / "result.json"  # a record an earlier report copied goes
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    (out / "halo" / "old_figure.png").write_bytes(b"not a figure of this report")
    assert report.main([str(sweeps), str(out), "--only", "halo", "invalid"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["halo", "invalid"]
    assert not (out / "halo" / "records").exists()
    packed = archive.read(out / "halo" / archive.ARCHIVE_NAME).paths
    assert sorted(packed) == sorted(f"records/{p.relative_to(RECORDS / 'halo').as_posix()}"
                                    for p in (RECORDS / "halo").rglob("result.json"))
    # the rows are those of the records' copies that earlier reports wrote
    assert set(load(out / "halo")["path"]) == {str(out / "halo" / key) for key in packed}

    runs = pd.read_csv(out / "halo" / "runs.csv")
    source = load(RECORDS / "halo")
    assert len(runs) == 18 and list(runs.columns) == list(report.RUN_COLUMNS)
    assert runs["chunks"].dtype.kind == "i" and runs["seed"].dtype.kind == "i"  # 2, not 2.0
    assert sorted(runs["epoch_time_median_s"]) == pytest.approx(sorted(source["epoch_time_median_s"]))

    summary = pd.read_csv(out / "halo" / "summary.csv")
    assert list(summary[["halo", "chunks"]].itertuples(index=False, name=None)) == \
        [(h, c) for h in ("exact", "historical", "none") for c in (1, 2, 4)]
    assert (summary["runs"] == 2).all()
    assert "halo: 9 settings, 2 runs (seeds) each" in capsys.readouterr().out
    row = summary[(summary.halo == "exact") & (summary.chunks == 4)].iloc[0]
    runs_of = source[(source.halo == "exact") & (source.chunks == 4)]
    assert row["test_acc_mean"] == pytest.approx(runs_of["test_acc"].mean(), rel=1e-5)
    full = source[(source.halo == "exact") & (source.chunks == 1)]["epoch_time_median_s"].mean()
    assert row["overhead_mean"] == pytest.approx(runs_of["epoch_time_median_s"].mean() / full, rel=1e-5)
    assert {"epoch_time_vs_chunks.png", "accuracy_vs_chunks.png", "memory_vs_chunks.png",
            "inflation_by_partitioner.png"} <= {p.name for p in (out / "halo").glob("*.png")}
    assert not (out / "halo" / "scaling.png").exists()  # one graph size only
    assert not (out / "halo" / "old_figure.png").exists()
    assert not (out / "halo" / "timeline.png").exists()  # these records have no trace

    # a preset with its own figure list draws only those (here: none, the records have one size)
    shutil.copytree(RECORDS / "partition", sweeps / "scaling")
    assert report.main([str(sweeps), str(out), "--only", "scaling"]) == 0
    assert (out / "scaling" / "summary.csv").is_file() and not list((out / "scaling").glob("*.png"))

    # a sweep whose only run was invalid: its record and tables, no figure
    assert not list((out / "invalid").glob("*.png"))
    assert pd.read_csv(out / "invalid" / "runs.csv")["status"].tolist() == ["invalid"]


def test_report_packs_traces_and_draws_the_timeline_of_one_run(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    report = _report()
    sweep = tmp_path / "multirun" / "pipeline"
    record = load_record(TIMELINE)
    for job, chunks, status, traced in (("0", 2, "completed", True), ("1", 4, "completed", True),
                                        ("2", 8, "failed", True), ("3", 4, "completed", True),
                                        ("4", 16, "completed", False)):
        config = {**record["config"], "chunks": chunks}
        write_record(sweep / job, {**record, "status": status, "config": config})
        if traced:
            shutil.copyfile(TIMELINE / "trace.json", sweep / job / "trace.json")
    out = tmp_path / "reference"
    assert report.main([str(sweep.parent), str(out)]) == 0
    packed = out / "pipeline" / archive.ARCHIVE_NAME
    traces = [key for key in archive.read(packed).paths if key.endswith("/trace.json")]
    assert traces == [f"records/{job}/trace.json" for job in "0123"]
    written, _ = archive.unpack(packed, tmp_path / "unpacked", keep=traces[1:2])
    assert written[0].read_bytes() == (TIMELINE / "trace.json").read_bytes()
    # the most chunks among completed traced runs (job 2 failed, job 4 has no trace), first by path
    records = out / "pipeline" / "records"
    assert report.timeline_run(load(packed), {out / "pipeline" / key for key in traces}) == records / "1"
    printed = capsys.readouterr().out
    assert "timeline.png: the traced step of records/1" in printed
    assert f"wrote {out / 'pipeline' / 'timeline.png'}" in printed
    assert (out / "pipeline" / "timeline.png").stat().st_size > 5_000


@pytest.mark.parametrize("damage", ["truncated", "empty", "binary", "nested"])
def test_report_names_unreadable_records_and_traces_and_fails(tmp_path: Path, damage: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A damaged result.json, and a damaged trace.json of the run the timeline draws: report.py writes
    what it can (the tables, the other figures), names each file on stderr and exits 1 (it used to exit 0
    with "1 unreadable", or stop with a raw JSONDecodeError traceback)."""
    from tests.results.test_results_cli import DAMAGED_JSON

    sweep = tmp_path / "multirun" / "pipeline"
    record = load_record(TIMELINE)
    for job in ("0", "1"):
        write_record(sweep / job, record)
    shutil.copyfile(TIMELINE / "trace.json", sweep / "0" / "trace.json")
    (sweep / "0" / "trace.json").write_bytes(DAMAGED_JSON[damage])
    (sweep / "1" / "result.json").write_bytes(DAMAGED_JSON[damage])
    out = tmp_path / "reference"
    assert _report().main([str(sweep.parent), str(out)]) == 1
    err = capsys.readouterr().err
    assert f"unreadable record {out / 'pipeline' / 'records' / '1' / 'result.json'}: " in err
    assert f"unreadable trace: {out / 'pipeline' / 'records' / '0' / 'trace.json'}: " in err
    assert "2 job(s) or file(s) left no usable record or trace" in err
    assert (out / "pipeline" / "runs.csv").is_file() and (out / "pipeline" / "summary.csv").is_file()


@pytest.mark.parametrize("kind", ["FIFO", "link to /dev/urandom"])
def test_report_names_a_trace_that_is_no_regular_file_and_fails(tmp_path: Path, kind: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A trace.json that is a FIFO or a link to /dev/urandom was dropped silently (exit 0, no trace); it is
    packed as unreadable now, named on stderr, and the exit status is 1 (the tables still written). A run
    whose trace can be read is the one drawn."""
    sweep = tmp_path / "multirun" / "pipeline"
    record = load_record(TIMELINE)
    for job in ("0", "1"):
        write_record(sweep / job, record)
    shutil.copyfile(TIMELINE / "trace.json", sweep / "1" / "trace.json")
    trace = sweep / "0" / "trace.json"
    if kind == "FIFO":
        os.mkfifo(trace)
    else:
        trace.symlink_to("/dev/urandom")
    out = tmp_path / "reference"
    assert _report().main([str(sweep.parent), str(out)]) == 1
    err = capsys.readouterr().err
    named = out / "pipeline" / "records" / "0" / "trace.json"
    assert f"pipeline: unreadable trace: {named}: NotRegularFileError: [Errno 22] {trace} is a " in err
    assert "1 job(s) or file(s) left no usable record or trace" in err
    assert (out / "pipeline" / "runs.csv").is_file() and (out / "pipeline" / "summary.csv").is_file()
    packed = archive.read(out / "pipeline" / archive.ARCHIVE_NAME, keep=())
    assert list(packed.unreadable) == ["records/0/trace.json"]


def test_report_names_a_missing_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _report().main([str(RECORDS), str(tmp_path), "--only", "poster_offline"])
    err = capsys.readouterr().err
    assert f"no sweep folder in {RECORDS} named poster_offline" in err


def test_report_names_jobs_without_a_record_and_fails(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    sweeps = tmp_path / "sweeps"
    shutil.copytree(RECORDS, sweeps)
    sweep = next(p for p in sorted(sweeps.iterdir()) if p.is_dir())
    killed = sweep / "killed"
    (killed / ".hydra").mkdir(parents=True)
    (killed / ".hydra" / "config.yaml").write_text("chunks: 2\n")
    assert _report().main([str(sweeps), str(tmp_path / "out"), "--only", sweep.name]) == 1
    err = capsys.readouterr().err
    assert f"job {killed} has no record (incomplete)" in err and "1 job(s) or file(s) left no usable" in err
    assert (tmp_path / "out" / sweep.name / "runs.csv").is_file()  # the records it has are reported


def test_figures_per_folder() -> None:
    """experiment=deep's folders, whatever their variant, get no curve (one setting each); a preset gets
    its own figures, the map and each of its slices the map's two; any other folder every figure."""
    report = _report()
    assert report.figures_of("deep_cora_full") == report.figures_of("deep_cora_historical_k4_val_loss") == []
    assert report.figures_of("pipeline") == ["speedup_vs_chunks.png"]
    assert report.figures_of("my_sweep") == list(report.FIGURES)
    map_figures = ["time_to_accuracy_vs_memory.png", "time_to_accuracy_vs_total_memory.png"]
    assert report.figures_of("sampled_map") == report.figures_of("sampled_map_physics_gcn") == map_figures


# report folders (a folder holding only a run directory, such as pipeline/timeline, is none)
PRESETS = sorted(name for name, p in COMMITTED_RESULTS.items()
                 if (p / "summary.csv").is_file() or (p / "records").is_dir()
                 or (p / archive.ARCHIVE_NAME).is_file())


@pytest.mark.parametrize("preset", PRESETS)
def test_committed_reference_tables_come_from_the_committed_records(preset: str) -> None:
    """results/reference/<preset>/summary.csv and runs.csv are what the report derives from the records
    committed beside them (so every number in results/README.md traces back to a record), packed in
    its records.jsonl.gz (every preset is; the larger ones in parts), with no records/<job>/result.json
    files beside it."""
    report = _report()
    folder = COMMITTED_RESULTS[preset]
    packed = folder / archive.ARCHIVE_NAME
    assert packed.is_file() and not (folder / "records").exists()
    df = load(packed)  # every part
    assert all(Path(p).is_relative_to(folder / "records") for p in df["path"])  # where the files unpacked
    assert len(df) > 0 and (df["status"] == "completed").all()
    expected = report.summary_table(df)
    committed = pd.read_csv(folder / "summary.csv")
    assert list(committed.columns) == list(expected.columns)
    pd.testing.assert_frame_equal(committed, expected.reset_index(drop=True), check_dtype=False, rtol=1e-5)
    runs = pd.read_csv(folder / "runs.csv")
    assert len(runs) == len(df) and sorted(runs["epoch_time_median_s"]) == pytest.approx(
        sorted(df["epoch_time_median_s"]), rel=1e-9)
    assert runs["git_sha"].str.fullmatch(r"[0-9a-f]{40}").all()  # clean checkouts only


def test_report_takes_one_sweep_as_well(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Given one sweep instead of a folder of sweeps, its report goes to out/<its name>: one report of
    every job, not one report per job."""
    sweep = RECORDS / "halo"
    assert _report().main([str(sweep), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"{sweep} is one sweep: its report goes to {tmp_path / 'out' / 'halo'}" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["halo"]
    runs = pd.read_csv(tmp_path / "out" / "halo" / "runs.csv")
    assert len(runs) == sum(1 for job in sweep.iterdir() if (job / "result.json").is_file())


def test_report_refuses_only_with_one_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _report().main([str(RECORDS / "halo"), str(tmp_path), "--only", "halo"])
    assert "is one sweep, not a folder of sweeps" in capsys.readouterr().err


def test_report_takes_the_sweeps_of_one_preset_as_one(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--one: a preset whose grid ran as several sweeps (chunks=1 apart, more seeds later) is one report
    of every run of them, each packed under records/<sweep>/<job>/, one summary over all of them."""
    preset = tmp_path / "multirun" / "halo_parts"
    for job in (RECORDS / "halo").iterdir():
        shutil.copytree(job, preset / ("k1" if "-c1-" in job.name else "grid") / job.name)
    out = tmp_path / "reference"
    assert _report().main([str(preset), str(out), "--one"]) == 0
    assert f"{preset} its sweeps are one preset's: its report goes to {out / 'halo_parts'}" in \
        capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["halo_parts"]
    packed = archive.read(out / "halo_parts" / archive.ARCHIVE_NAME).paths
    assert {key.split("/")[1] for key in packed} == {"k1", "grid"} and len(packed) == 18
    summary = pd.read_csv(out / "halo_parts" / "summary.csv")
    assert sorted(summary["chunks"].unique()) == [1, 2, 4] and (summary["runs"] == 2).all()
    with pytest.raises(SystemExit):
        _report().main([str(preset), str(out), "--one", "--only", "k1"])
    assert "--one reports every sweep of the folder together" in capsys.readouterr().err
