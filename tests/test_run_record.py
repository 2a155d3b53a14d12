"""The result record (pipegnn/run_record.py): its written form, the migration of older versions, the errors
of a record that cannot be read, the rule that combines a spawned pipeline's records, and every
committed record read through it."""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from pipegnn.results import archive
from pipegnn.results.record_files import RecordError, find_records, load_record, record_of
from pipegnn.run_record import (
    COMBINE,
    LAUNCHER,
    OPTIONAL,
    RANK0,
    RANK0_IF_COMPLETED,
    RECORD_VERSION,
    RecordFormatError,
    RunRecord,
    Status,
    migrate,
)
from pipegnn.runs.record_writes import write_record

from tests.helpers import ROOT

REFERENCE = ROOT / "results" / "reference"
FIXTURES = ROOT / "tests" / "fixtures"
#: A committed version-1 record of a spawned pipeline (its keys in the order that launcher wrote them:
#: ``pipeline`` before ``features``, then ``workers``).
SPAWNED = (ROOT / "results" / "superseded" / "deep_cora_historical_k8_node_mask" / archive.ARCHIVE_NAME,
           "records/0/result.json")
#: A committed version-1 record of an invalid run (no ``dataset``, no ``model``).
INVALID = FIXTURES / "records" / "invalid" / "cpu4" / "result.json"


def _packed(where: tuple[Path, str]) -> Any:
    return archive.read(where[0], keep=[where[1]]).files[where[1]]


def _fresh() -> RunRecord:
    """A record as a run fills it (a completed single-process run)."""
    return RunRecord(status=Status.COMPLETED, config={"chunks": 2, "engine": {"name": "single"}},
                     choices={"model": "gat", "dataset": None}, env={"git_sha": "abc"},
                     epochs=[{"epoch": 0, "val_acc": 0.5}], final={"test_acc": 0.8}, timing={"total_s": 1.0},
                     memory={"peak_rss_bytes": 1, "peak_device_bytes": {}}, microbatch={"chunks": 2},
                     dataset={"name": "cora"}, model={"parameters": 10}, features={"rows": 1},
                     pipeline={"schedule": "single", "stages": [{"busy_s": 0.1}]})


def test_a_record_is_written_as_before_with_its_version_first() -> None:
    record = _fresh()
    written = record.to_dict()
    assert list(written) == ["record_version", "status", "error", "config", "choices", "env", "epochs",
                             "final", "timing", "memory", "microbatch", "dataset", "model", "features",
                             "pipeline"]
    assert written["record_version"] == RECORD_VERSION == 2 and written["status"] == "completed"
    assert type(written["status"]) is str and written["error"] is None  # error: always there, null
    assert "traceback" not in written and "workers" not in written  # absent optional sections: left out
    text = json.dumps(written, indent=2)
    again = RunRecord.from_dict(json.loads(text))
    assert again == record and json.dumps(again.to_dict(), indent=2) == text
    # read-only, a record is also a mapping of its written form
    assert record["status"] == "completed" and record.get("workers") is None and "pipeline" in record
    assert dict(record) == written and len(record) == len(written)
    assert str(Status.OOM) == f"{Status.OOM}" == "oom" and Status.OOM == "oom"


def test_a_committed_version_1_record_reads_and_writes_back_as_it_was(tmp_path: Path) -> None:
    """A version-1 record read and written again: the same keys in the same order, the same values,
    ``record_version`` added first (the file's bytes, one line more)."""
    value = _packed(SPAWNED)
    assert "record_version" not in value and list(value).index("pipeline") < list(value).index("features")
    record = RunRecord.from_dict(value)
    assert record.status is Status.COMPLETED and record.workers is not None and record.traceback is None
    assert record.to_dict() == {"record_version": 2, **value}
    assert list(record.to_dict()) == ["record_version", *value]  # the order read, kept
    original = write_record(tmp_path / "v1", value).read_text()
    rewritten = write_record(tmp_path / "v2", record).read_text()
    assert rewritten == original.replace("{\n", '{\n  "record_version": 2,\n', 1)


def test_migrating_a_version_1_record() -> None:
    value = json.loads(INVALID.read_text())
    before = copy.deepcopy(value)
    migrated = migrate(value)
    assert value == before  # the record read is left as it is
    assert migrated == {"record_version": 2, **value} and list(migrated) == ["record_version", *value]
    assert "dataset" not in migrated and "model" not in migrated  # an invalid run has none
    record = RunRecord.from_dict(value, INVALID)
    assert record.status is Status.INVALID and record.dataset is None and record.epochs == []
    assert migrate(record.to_dict()) == record.to_dict()  # version 2: nothing to do
    # What version-1 readers let a record lack, or hold as null, version 2 holds (empty) or leaves out.
    sparse = {"status": "failed", "config": None, "epochs": None, "pipeline": None, "traceback": None}
    assert migrate(sparse) == {"record_version": 2, "status": "failed", "config": {}, "epochs": [],
                               "error": None, "choices": {}, "env": {}, "final": {}, "timing": {},
                               "memory": {}, "microbatch": {}}


@pytest.mark.parametrize("change, key, message", [
    ({"notes": "x"}, "notes", "malformed record: unknown key 'notes' (a record's keys: record_version, "
                              "status,"),
    ({"timing": [1]}, "timing", "malformed record: 'timing' is an array, expected an object"),
    ({"status": "done"}, "status", "malformed record: 'status' is 'done', expected one of completed, failed, "
                                   "invalid, oom, interrupted"),
    ({"status": 1}, "status", "malformed record: 'status' is a number, expected a string"),
    ({"error": {}}, "error", "malformed record: 'error' is an object, expected a string or null"),
    ({"epochs": [[]]}, "epochs", "malformed record: 'epochs' holds an array, expected objects"),
    ({"workers": "2"}, "workers", "malformed record: 'workers' is a string, expected an object"),
    ({"pipeline": {"stages": [1]}}, "pipeline", "malformed record: 'pipeline.stages' holds a number, "
                                                "expected objects"),
    # a probe's 2.6 million stages were as many columns of the runs table; a balance as long (a second case)
    ({"pipeline": {"stages": [{}] * 2_600_000}}, "pipeline", "malformed record: 'pipeline.stages' holds "
                                                            "2,600,000 stages, more than any run's 8,194"),
    ({"pipeline": {"balance": [1] * 8195}}, "pipeline", "malformed record: 'pipeline.balance' holds 8,195 "
                                                       "stages"),
    ({"config": {"x": functools.reduce(lambda v, _: [v], range(70), 1)}}, "config",
     "malformed record: 'config' nests objects and arrays more than 64 deep"),
    ({"record_version": "2"}, "record_version", "malformed record: 'record_version' is '2', expected a "
                                                "version"),
    ({"record_version": 3}, "record_version", "record_version 3 is newer than this pipegnn reads (up to 2): "
                                              "update pipegnn to read this record"),
])
def test_a_record_that_cannot_be_read_is_one_error_naming_the_key_and_the_file(
        change: dict[str, Any], key: str, message: str, tmp_path: Path) -> None:
    value = {**_fresh().to_dict(), **change}
    with pytest.raises(RecordFormatError) as info:
        RunRecord.from_dict(value)
    assert info.value.reason.startswith(message) and info.value.key == key and info.value.path is None
    assert str(info.value) == info.value.reason and isinstance(info.value, ValueError)
    path = tmp_path / "result.json"
    with pytest.raises(RecordFormatError) as info:
        RunRecord.from_dict(value, path)
    assert str(info.value).startswith(f"{path}: {message}") and info.value.path == path
    write_record(tmp_path, value)  # the loaders of files and archive lines: RecordError naming the file
    with pytest.raises(RecordError, match=f"^{path}: "):
        load_record(path)
    with pytest.raises(RecordError, match="^records/1/result.json: "):
        record_of(value, "records/1/result.json")


def test_the_most_stages_a_record_lists_are_the_most_a_model_can_be_cut_into() -> None:
    """``MAX_STAGES`` (run_record imports no model code) is a stage per unit of the deepest model: two a
    layer, and a stack's input and output units."""
    from pipegnn.models import MAX_LAYERS
    from pipegnn.run_record import MAX_STAGES

    assert MAX_STAGES == 2 * MAX_LAYERS + 2


def test_a_version_2_record_lacking_a_field_every_record_has_is_refused() -> None:
    value = _fresh().to_dict()
    del value["env"]
    with pytest.raises(RecordFormatError, match="^malformed record: no 'env'$"):
        RunRecord.from_dict(value)
    with pytest.raises(RecordFormatError, match="not a JSON object but an array"):
        RunRecord.from_dict([value])


def test_each_field_states_where_a_spawned_pipelines_record_takes_it_from() -> None:
    sources = {f.name: f.metadata[COMBINE] for f in dataclasses.fields(RunRecord) if COMBINE in f.metadata}
    assert set(sources.values()) == {LAUNCHER, RANK0, RANK0_IF_COMPLETED}
    # the allow-list this rule replaced (outcome.MERGED), memory only for a completed run
    merged = {"env", "dataset", "model", "epochs", "final", "microbatch", "memory", "pipeline", "trace",
              "features", "resumed"}
    assert set(RunRecord.from_rank0(completed=True)) == merged
    assert set(RunRecord.from_rank0(completed=False)) == merged - {"memory"}
    optional = {f.name for f in dataclasses.fields(RunRecord) if f.metadata.get(OPTIONAL)}
    assert optional == {"dataset", "model", "features", "resumed", "trace", "pipeline", "workers",
                        "interrupted", "traceback", "unwritten", "overrides"}


def _launcher() -> RunRecord:
    return RunRecord(status=Status.FAILED, config={"chunks": 2}, choices={}, env={"torch_threads": 16},
                     timing={"total_s": 9.0}, memory={"peak_rss_bytes": 5})


def test_combine_a_completed_run_takes_rank_0s_sections_and_memory() -> None:
    rank0 = _fresh()
    rank0.env = {"torch_threads": 2}
    parent = _launcher()
    combined = RunRecord.combine(parent, rank0.to_dict(), epochs=[{"epoch": 0}], completed=True)
    assert combined is not parent and parent.dataset is None  # the launcher's record is left as it was
    for name in RunRecord.from_rank0(True):
        assert getattr(combined, name) == getattr(rank0, name), name
    assert combined.memory == rank0.memory and combined.env == {"torch_threads": 2}
    # the launcher keeps its own status, config, timing
    assert (combined.status, combined.config, combined.timing) == (Status.FAILED, {"chunks": 2},
                                                                   {"total_s": 9.0})
    assert RunRecord.combine(parent, rank0, completed=True) == combined  # rank 0's as a RunRecord too


def test_combine_a_failed_run_keeps_the_launchers_memory_and_the_epochs_rank_0_streamed() -> None:
    parent = _launcher()
    streamed = [{"epoch": 0}, {"epoch": 1}, {"epoch": 2}]
    rank0 = {**_fresh().to_dict(), "status": "failed", "epochs": streamed[:1], "pipeline": None}
    combined = RunRecord.combine(parent, rank0, epochs=streamed, completed=False)
    assert combined.memory == {"peak_rss_bytes": 5}  # after a failure the launcher records its own
    assert combined.epochs == streamed  # more than rank 0 reported
    assert combined.dataset == {"name": "cora"} and combined.pipeline is None
    assert RunRecord.combine(parent, rank0, epochs=streamed[:1], completed=False).epochs == streamed[:1]
    # rank 0 reported nothing (it died), or only its status (its watchdog): the streamed epochs only
    for reported in (None, {"status": "failed", "error": "TimeoutError: ...", "traceback": None}):
        alone = RunRecord.combine(parent, reported, epochs=streamed[:2], completed=False)
        assert alone == dataclasses.replace(parent, epochs=streamed[:2])


def _committed() -> list[tuple[str, Any]]:
    """Every committed record: the archives' and the folders' (results/reference, tests/fixtures)."""
    found = []
    for root in (REFERENCE, ROOT / "results" / "superseded", FIXTURES):
        for file in find_records(root):
            found.append((str(file), json.loads(file.read_bytes())))
        for packed in archive.archives_of(root):  # each archive whole, by its first part
            for entry in archive.entries(packed):
                if entry.path.endswith("/result.json"):
                    assert entry.unreadable is None, (packed, entry.path)
                    found.append((f"{packed}:{entry.path}", entry.value))
    return found


@pytest.mark.slow  # make test-all; the drift test reads every reference record in make test
def test_every_committed_record_reads_through_the_record_type() -> None:
    """About 800 records (every preset's archive, the fixtures): about 5 s, nearly all of it gzip and JSON
    (the record type's checks and migration: 0.04 s)."""
    committed = _committed()
    assert len(committed) > 800
    statuses = set()
    for where, value in committed:
        record = RunRecord.from_dict(value, where)
        assert record.to_dict() == {"record_version": 2, **value}, where
        statuses.add(record.status)
    assert statuses == {Status.COMPLETED, Status.INVALID}
