"""Sweeps on disk (pipegnn/results/sweep.py): resume checks, a sweep's jobs, those it left without a
record."""
from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from pipegnn.results.sweep import planned_jobs, sweep_jobs
from pipegnn.run_record import Status
from pipegnn.runs.record_writes import write_record
from pipegnn.runs.resume_check import completed_record

from tests.helpers import make_cfg
from tests.results.completed import FINISHED, completed, killed_sweep


def _container(*overrides: str) -> dict:
    return OmegaConf.to_container(make_cfg(*overrides), resolve=True)


def test_resume_keeps_only_a_completed_record_of_the_same_config(tmp_path: Path) -> None:
    cfg = _container("chunks=2")
    assert completed_record(tmp_path, cfg) == (None, "no previous record")
    write_record(tmp_path, {"status": "failed", "config": cfg, "error": "boom"})
    assert completed_record(tmp_path, cfg) == (None, "previous record is failed")
    write_record(tmp_path, completed(cfg))
    record, reason = completed_record(tmp_path, cfg)
    assert record is not None and reason == "completed"
    # resume itself is volatile: a record made with resume=false is kept by a resume=true run
    assert completed_record(tmp_path, {**cfg, "resume": True})[0] is not None
    # the job's own output dir inside a path (a timestamped path) does not count as a change
    inside = {**cfg, "data": {**cfg["data"], "cache": f"{tmp_path}/cache"}}
    write_record(tmp_path, completed(inside))
    assert completed_record(tmp_path, inside)[0] is not None
    write_record(tmp_path, completed(cfg))
    record, reason = completed_record(tmp_path, _container("chunks=4"))
    assert record is None and reason == "config changed since the completed record: chunks: 2 -> 4"
    # a record older than a key that this config leaves null (a later option's default) is kept
    older = {**cfg, "train": {k: v for k, v in cfg["train"].items() if k != "checkpoint_every"}}
    write_record(tmp_path, completed(older))
    assert cfg["train"]["checkpoint_every"] is None and completed_record(tmp_path, cfg)[0] is not None
    assert completed_record(tmp_path, _container("chunks=2", "train.checkpoint_every=5"))[0] is None
    (tmp_path / "result.json").write_text("{not json")
    assert completed_record(tmp_path, cfg)[1].startswith("previous record unreadable")
    # nested too deeply for the parser: the job reruns (a RecursionError used to end the job, no record)
    (tmp_path / "result.json").write_text("[" * 100_000 + "]" * 100_000)
    assert completed_record(tmp_path, cfg) == (None, "previous record unreadable (RecursionError: nested too "
                                                     "deeply to parse)")


def test_resume_reruns_a_malformed_record(tmp_path: Path) -> None:
    cfg = _container("chunks=2")
    write_record(tmp_path, completed(cfg, epochs=3))
    record, reason = completed_record(tmp_path, cfg)
    assert record is None
    assert reason == "previous record unreadable (malformed record: 'epochs' is a number, expected an array)"


def test_resume_reads_the_record_through_the_record_type(tmp_path: Path) -> None:
    """A version-1 record is migrated and kept; one of a newer version than this code reads reruns the job,
    saying why."""
    cfg = _container("chunks=2")
    written = completed(cfg, error=None)  # version 1
    write_record(tmp_path, written)
    record, reason = completed_record(tmp_path, cfg)
    assert reason == "completed" and record is not None and record.status is Status.COMPLETED
    assert record.to_dict()["record_version"] == 2 and record.epochs == written["epochs"]
    write_record(tmp_path, {**record.to_dict(), "record_version": 3})
    assert completed_record(tmp_path, cfg) == (None, "previous record unreadable (record_version 3 is "
                                                     "newer than this pipegnn reads (up to 2): update "
                                                     "pipegnn to read this record)")


def test_sweep_jobs_ignores_jobs_of_an_older_sweep(tmp_path: Path) -> None:
    marker = tmp_path / "multirun.yaml"  # what a sweeper writes before its first job (one whose plan is
    marker.write_text("hydra:\n  sweeper:\n    _target_: pipegnn.results.sweep.Job\n"  # not known here)
                      "  overrides:\n    task: []\n")
    since = marker.stat().st_mtime
    for job, status in ((0, "completed"), (1, "failed")):
        write_record(tmp_path / str(job), {"status": status, "error": "E: x\nmore" if job else None,
                                           **(FINISHED if status == "completed" else {})})
    os.utime(tmp_path / "1" / "result.json", (since - 10, since - 10))  # left from an older sweep
    jobs = sweep_jobs(tmp_path)
    assert [(j.num, j.status, j.error) for j in jobs] == [(0, "completed", None), (1, "failed", "E: x")]
    assert [j.num for j in sweep_jobs(tmp_path, since)] == [0]


def test_sweep_jobs_name_the_jobs_a_killed_sweep_left_without_a_record(tmp_path: Path) -> None:
    sweep = killed_sweep(tmp_path / "sweep")
    dirs = ["+variant=a,chunks=2", "+variant=b,chunks=2", "+variant=a,chunks=4", "+variant=b,chunks=4"]
    assert planned_jobs(sweep) == [(o.split(","), sweep / d) for o, d in zip(
        ["chunks=2,+variant=a", "chunks=2,+variant=b", "chunks=4,+variant=a", "chunks=4,+variant=b"], dirs)]
    assert planned_jobs(tmp_path) is None  # no multirun.yaml
    since = (sweep / "multirun.yaml").stat().st_mtime
    jobs = sweep_jobs(sweep, since)
    assert [(j.num, j.directory, j.status) for j in jobs] == [
        (0, sweep / dirs[0], "completed"), (1, sweep / dirs[1], "incomplete"),
        (2, sweep / dirs[2], "unreadable"), (3, sweep / dirs[3], "missing")]
    assert jobs[1].error.startswith("no result.json") and jobs[1].config == {"chunks": 2}
    assert jobs[2].error == "malformed record: 'final' is an array, expected an object"
    assert jobs[3].error == "never started: job 3 of the sweep (chunks=4 +variant=b)"
    assert (jobs[3].config, jobs[3].choices) == ({"chunks": 4}, {"variant": "b"})
    # jobs of an older sweep in the same folder do not stand for this one's
    later = since + 100
    os.utime(sweep / "multirun.yaml", (later, later))
    assert [j.status for j in sweep_jobs(sweep, later)] == ["missing"] * 4


def test_a_key_added_since_a_record_keeps_its_job_at_the_old_behaviour() -> None:
    """engine.capture arrived after the committed records: a config with its old behaviour (none)
    compares equal to a record's config without the key, and any other value does not."""
    from pipegnn.config.compare import comparable_config

    now = OmegaConf.to_container(make_cfg("engine=single"), resolve=True)
    before = {**now, "engine": {k: v for k, v in now["engine"].items() if k != "capture"}}
    assert now["engine"]["capture"] == "none" and "capture" not in before["engine"]
    assert comparable_config(now) == comparable_config(before)
    captured = {**now, "engine": {**now["engine"], "capture": "cuda_graph"}}
    assert comparable_config(captured) != comparable_config(before)
    assert comparable_config(captured)["engine"]["capture"] == "cuda_graph"
