"""Reading results someone sent you (pipegnn/results: the runs table and its command line, report.py, the
records archives, resume's check): nothing a file names is imported or called; a record is completed only
when its fields say so; an archive is read within bounds and written nowhere but its own layout; a file
that is not a regular one (a link to nothing, a folder, a FIFO) is named, never waited on, and never hides
a sweep's missing jobs."""
from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import math
import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Iterator

import pytest
from omegaconf import OmegaConf

from pipegnn.integrity import stream_checksum
from pipegnn.jsonfile import NotRegularFileError
from pipegnn.results import archive, load, load_record
from pipegnn.results.__main__ import main
from pipegnn.results.archive import ARCHIVE_NAME, ArchiveError
from pipegnn.results.record_files import RecordError
from pipegnn.results.sweep import sweep_jobs
from pipegnn.runs.record_writes import write_record
from pipegnn.runs.resume_check import completed_record

from tests.helpers import COMPLETED_RECORD, ROOT, killed_model_sweep, make_cfg
from tests.results.completed import FINISHED, completed

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _report():
    spec = importlib.util.spec_from_file_location("report", ROOT / "experiments" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- Nothing a file names is imported or called -------------------------------------------------------

#: A module that a sent folder carries beside its multirun.yaml: importing it leaves a file behind.
SENT_MODULE = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n\n\nclass Sweeper:\n    pass\n"


def test_reading_a_sweep_never_imports_the_sweeper_its_plan_names(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """multirun.yaml names a sweeper (hydra.sweeper._target_) whose module came with the folder: the
    table, its command line run from inside the folder (where Python imports from) and report.py used to
    import it to check that it is a class, running its code. The name is compared as text now: the plan
    is another sweeper's, not known here."""
    marker = tmp_path / "ran"
    sweep = killed_model_sweep(tmp_path / "sweep")
    plan = OmegaConf.load(sweep / "multirun.yaml")
    plan.hydra.sweeper._target_ = "pipegnn_sent_sweeper.Sweeper"
    OmegaConf.save(plan, sweep / "multirun.yaml")
    (sweep / "pipegnn_sent_sweeper.py").write_text(SENT_MODULE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(sweep))
    df = load(sweep)
    assert not marker.exists() and "pipegnn_sent_sweeper" not in sys.modules
    assert list(df["status"]) == ["completed", "incomplete", "completed"]  # job 3 unknown: another sweeper
    assert _report().main([str(tmp_path), str(tmp_path / "out"), "--only", "sweep"]) == 1  # job 1
    assert not marker.exists()
    done = subprocess.run([sys.executable, "-m", "pipegnn.results", ".", "--columns", "chunks,status"],
                          cwd=sweep, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "3 runs: 2 completed, 1 incomplete" in done.stdout, done.stderr
    assert not marker.exists()


def test_reading_a_sweep_calls_no_resolver_its_files_name(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpolation that calls a resolver (any registered one: a notebook may have registered
    ``eval``; OmegaConf's ``oc.env`` reads the environment) in a job's .hydra/config.yaml, its
    hydra.yaml or the sweep's subdir used to be called when the table was read; it stays as its text now,
    while an interpolation between the file's own keys still resolves."""
    calls: list[tuple[Any, ...]] = []
    OmegaConf.register_new_resolver("pipegnn_sent", lambda *args: calls.append(args) or "called")
    monkeypatch.setenv("PIPEGNN_SENT_SECRET", "s3cret")
    try:
        sweep = killed_model_sweep(tmp_path / "sweep")
        hydra = sweep / "1" / ".hydra"
        (hydra / "config.yaml").write_text(
            "chunks: 2\nlr: 0.5\ntrain:\n  lr: ${lr}\n  note: ${pipegnn_sent:config}\n"
            "  secret: ${oc.env:PIPEGNN_SENT_SECRET}\n  again: ${train.note}\n")
        (hydra / "hydra.yaml").write_text(
            "hydra:\n  job:\n    num: ${pipegnn_sent:num}\n  runtime:\n    choices:\n"
            "      model: ${pipegnn_sent:choice}\n")
        plan = OmegaConf.load(sweep / "multirun.yaml")
        plan.hydra.sweep.subdir = "${pipegnn_sent:subdir}"
        plan.hydra.job.config = {"override_dirname": {"kv_sep": "=", "item_sep": ",", "exclude_keys": []}}
        OmegaConf.save(plan, sweep / "multirun.yaml")
        assert "subdir: ${pipegnn_sent:subdir}" in (sweep / "multirun.yaml").read_text()
        df = load(sweep)
        assert calls == []
        row = df[df["status"] == "incomplete"].iloc[0]
        assert row["cfg.train.lr"] == 0.5  # between the file's own keys
        assert row["cfg.train.note"] == row["cfg.train.again"] == "${pipegnn_sent:config}"
        assert row["cfg.train.secret"] == "${oc.env:PIPEGNN_SENT_SECRET}"
        assert row["model"] == "${pipegnn_sent:choice}"
        assert list(df["status"]) == ["completed", "incomplete", "completed", "missing"]
        assert df["path"].iloc[-1] == str(sweep / "3" / "result.json")  # its folder: the job number
        assert [j.status for j in sweep_jobs(sweep)] == ["completed", "incomplete", "completed", "missing"]
        assert calls == []
    finally:
        OmegaConf.clear_resolver("pipegnn_sent")


# --- A record is completed only when its fields say so --------------------------------------------------

#: ``completed`` records that no completed run leaves, with why each is not one.
NOT_COMPLETED = {
    "no epochs": ({"epochs": []}, "malformed record: status 'completed' but no epochs"),
    "accuracy as text": ({"final": {**FINISHED["final"], "test_acc_at_best_val": "0.91"}},
                         "malformed record: status 'completed' but 'final.test_acc_at_best_val' is a string, "
                         "expected a number from 0 to 1"),
    "accuracy NaN": ({"final": {**FINISHED["final"], "best_val_acc": math.nan}},
                     "malformed record: status 'completed' but 'final.best_val_acc' is nan, expected a "
                     "number from 0 to 1"),
    "accuracy absent": ({"final": {k: v for k, v in FINISHED["final"].items() if k != "test_acc"}},
                        "malformed record: status 'completed' but no 'final.test_acc'"),
    "epoch accuracy a flag": ({"epochs": [{"epoch": 0, "train_acc": 0.5, "val_acc": True, "test_acc": 0.5}]},
                              "malformed record: status 'completed' but 'epochs[0].val_acc' is a boolean, "
                              "expected a number from 0 to 1"),
    "empty epoch": ({"epochs": [{}]}, "malformed record: status 'completed' but no 'epochs[0].train_acc'"),
    "epoch without accuracies": ({"epochs": [{"epoch": 0, "train_acc": 0.5, "val_acc": 0.5, "test_acc": 0.5},
                                             {"epoch": 1, "loss": 0.3}]},
                                 "malformed record: status 'completed' but no 'epochs[1].train_acc'"),
    # 1 of 3 epochs and no early stop (the example), and 2 of 3 whose stop is null (a second case)
    "1 of 3 epochs": ({"epochs": FINISHED["epochs"]},
                      "malformed record: status 'completed' but 1 of train.epochs=3 epochs and no early stop "
                      "(final.stopped_epoch)"),
    "2 of 3 epochs, no stop": ({"epochs": [{**FINISHED["epochs"][0], "epoch": e} for e in (0, 1)],
                                "final": {**FINISHED["final"], "stopped_epoch": None}},
                               "malformed record: status 'completed' but 2 of train.epochs=3 epochs and no "
                               "early stop (final.stopped_epoch)"),
}


@pytest.mark.parametrize("name", list(NOT_COMPLETED))
def test_resume_reruns_every_completed_record_the_table_calls_unreadable(tmp_path: Path, name: str) -> None:
    """One rule for resume and the table: ``epochs: [{}]`` (or an epoch without its accuracies) was
    skipped by resume=true as completed while the docs said otherwise; every epoch must hold its
    train/val/test accuracies now, and each such record is unreadable to both, with the same reason."""
    cfg = OmegaConf.to_container(make_cfg("chunks=2"), resolve=True)
    write_record(tmp_path / "job", completed(cfg, **NOT_COMPLETED[name][0]))
    reason = f"previous record unreadable ({NOT_COMPLETED[name][1]})"
    assert completed_record(tmp_path / "job", cfg) == (None, reason)
    df = load(tmp_path)
    assert df[["status", "error"]].values.tolist() == [["unreadable", NOT_COMPLETED[name][1]]]


def test_a_completed_record_without_epochs_or_accuracies_is_unreadable_and_rerun(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """result.json files saying ``completed`` with no epochs, or an accuracy that is text: the table
    listed them as completed (exit 0) and resume=true skipped their jobs for good. Now each is an
    unreadable row naming the file and why, the command line exits 1, and resume runs the job again."""
    cfg = OmegaConf.to_container(make_cfg("chunks=2"), resolve=True)
    write_record(tmp_path / "ok", completed(cfg))
    for name in ("no epochs", "accuracy as text"):
        write_record(tmp_path / name, completed(cfg, **NOT_COMPLETED[name][0]))
        record, reason = completed_record(tmp_path / name, cfg)
        assert record is None and reason == f"previous record unreadable ({NOT_COMPLETED[name][1]})"
        with pytest.raises(RecordError, match="malformed record: status 'completed' but"):
            load_record(tmp_path / name)
    assert completed_record(tmp_path / "ok", cfg)[1] == "completed"
    df = load(tmp_path)
    assert df[["path", "status"]].values.tolist() == [
        [str(tmp_path / name / "result.json"), status] for name, status in (
            ("accuracy as text", "unreadable"), ("no epochs", "unreadable"), ("ok", "completed"))]
    assert list(df["error"][:2]) == [NOT_COMPLETED["accuracy as text"][1], NOT_COMPLETED["no epochs"][1]]
    assert main([str(tmp_path), "--columns", "status"]) == 1
    err = capsys.readouterr().err
    assert f"unreadable: {tmp_path / 'no epochs' / 'result.json'}: malformed record" in err


def _archive(path: Path, entries: list[tuple[Any, Any]]) -> Path:
    """An archive of ``entries`` (key, JSON value) as they are, with a header that fits them (a packer
    that checked nothing, or a hand that edited one)."""
    lines = [json.dumps({"path": key, "json": value}).encode() + b"\n" for key, value in entries]
    header = {"format": "pipegnn.records", "version": 1, "files": len(lines),
              "checksum": stream_checksum(lines)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(header).encode() + b"\n" + b"".join(lines)))
    return path


def test_a_completed_archive_line_without_what_a_run_writes_is_unreadable(tmp_path: Path) -> None:
    """The same in an archive's lines (NaN, a missing or boolean accuracy as well): each such line is an
    unreadable row at its place, the whole ones still read, and the jobs of a sweep holding such records
    are unreadable, not completed, for the end-of-sweep summary too."""
    cfg = {"chunks": 2, "train": {"epochs": 3}}
    names = list(NOT_COMPLETED)
    lines = [(f"records/{i}/result.json", completed(cfg, **NOT_COMPLETED[name][0]))
             for i, name in enumerate(names)]
    packed = _archive(tmp_path / "sent" / ARCHIVE_NAME,
                      [*lines, (f"records/{len(names)}/result.json", completed(cfg))])
    df = load(packed)
    assert list(df["status"]) == ["unreadable"] * len(names) + ["completed"]
    assert list(df["error"][:-1]) == [NOT_COMPLETED[name][1] for name in names]
    written, _ = archive.unpack(packed, tmp_path / "sweep")
    assert [j.status for j in sweep_jobs(tmp_path / "sweep")] == ["unreadable"] * len(names) + ["completed"]
    for i in range(len(names)):
        assert completed_record(tmp_path / "sweep" / "records" / str(i), cfg)[0] is None


# --- Archives: read within bounds, written only in their own layout -------------------------------------

def _bomb(path: Path, filler: bytes, files: int = 1, gib: int = 4) -> Path:
    """A records archive of a few MB whose gzip stream inflates to ``gib`` GiB: a header counting
    ``files``, then ``filler`` repeated (64 MiB gzip members, as gzip reads them: one stream)."""
    header = json.dumps({"format": "pipegnn.records", "version": 1, "files": files,
                         "checksum": "crc32:00000000"}).encode() + b"\n"
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = z.compress(filler * ((64 << 20) // len(filler))) + z.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(header) + member * (gib * 16))
    return path


#: Reading an archive with at most 3 GiB of address space (the bombs inflate to 4).
_LIMITED = ("import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "sys.argv = [sys.argv[1], *sys.argv[2:]]; runpy.run_module(sys.argv[0], run_name='__main__')")


def _limited(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LIMITED, *args], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("bomb, reason", [
    (b"\0", "a line inflates to more than 8,388,608 bytes"),  # one endless line
    (b"\n", "3 lines or more after the header, which says 2"),  # gigabytes of empty lines
])
def test_an_archive_that_inflates_to_gigabytes_is_refused_not_read_into_memory(
        tmp_path: Path, bomb: bytes, reason: str) -> None:
    """A 4 MB records.jsonl.gz that inflates to 4 GiB (one line of zeros, the example; or short lines far
    past the header's count): inflated whole into memory, it ended in a MemoryError traceback (here
    under a 3 GiB limit). It is read as a stream now, within bounds: one unreadable row, exit 2 for
    --unpack, nothing written."""
    packed = _bomb(tmp_path / "sent" / ARCHIVE_NAME, bomb, files=2 if bomb == b"\n" else 1)
    assert packed.stat().st_size < 8 << 20
    done = _limited("pipegnn.results", str(packed), "--columns", "status")
    assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1 and f"unreadable: {packed}: {reason}" in done.stderr
    done = _limited("pipegnn.results.archive", "--unpack", str(packed), str(tmp_path / "out"))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2 and done.stderr.startswith(f"error: {packed}: {reason}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key, problem", [
    ("records/1\0/result.json", "holds a character no file name may"),  # NUL
    ("records/\ud800/result.json", "holds a character no file name may"),  # no file system can name it
])
def test_a_key_no_file_can_be_named_by_is_a_damaged_archive(tmp_path: Path, key: str, problem: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A key holding NUL crashed the table (ValueError: embedded null byte, the whole table lost) and
    --unpack (a traceback); a lone surrogate likewise (UnicodeEncodeError). Each is one unreadable row
    for the archive now, and --unpack exits 2 naming the line, writing nothing."""
    packed = _archive(tmp_path / "sent" / ARCHIVE_NAME, [
        ("records/0/result.json", COMPLETED_RECORD), (key, COMPLETED_RECORD)])
    df = load(packed)
    assert df[["path", "status"]].values.tolist() == [[str(packed), "unreadable"]]
    assert df["error"][0].startswith(f"line 3: path {key!r} {problem}")
    assert archive.main(["--unpack", str(packed), str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {packed}: line 3: path {key!r} {problem}")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("keys, problem", [
    (["a", "a/result.json"], "line 2: path 'a' is none of a run's files"),
    (["x/result.json", "x/result.json/trace.json"],
     "line 3: path 'x/result.json/trace.json' puts a folder where the path 'x/result.json' is a file"),
])
def test_a_key_that_is_another_keys_folder_is_a_damaged_archive(tmp_path: Path, keys: list[str],
                                                                 problem: str) -> None:
    """Keys ``a`` and ``a/result.json`` (a file and a folder of one name) crashed --unpack halfway
    (FileExistsError / NotADirectoryError, some files written); so did ``x/result.json`` beside
    ``x/result.json/trace.json``. Both are refused before anything is written."""
    packed = _archive(tmp_path / "sent" / ARCHIVE_NAME, [(key, COMPLETED_RECORD) for key in keys])
    with pytest.raises(ArchiveError) as raised:
        archive.unpack(packed, tmp_path / "out")
    assert raised.value.reason.startswith(problem)
    assert not (tmp_path / "out").exists()
    assert archive.main(["--unpack", str(packed), str(tmp_path / "out")]) == 2
    assert load(packed)["status"].tolist() == ["unreadable"]


@pytest.mark.parametrize("key", [".bashrc", "records/0/sitecustomize.py"])
def test_a_key_outside_the_archives_layout_is_never_written(tmp_path: Path, key: str) -> None:
    """A key that names no run's file (a shell's start-up file, a module Python imports at start-up) was
    written where --unpack put the archive's files. An archive holds records and traces only: such a key
    is a damaged archive, and nothing is written."""
    packed = _archive(tmp_path / "sent" / ARCHIVE_NAME, [(key, {"x": 1}), ("records/1/result.json",
                                                                            COMPLETED_RECORD)])
    assert archive.main(["--unpack", str(packed), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
    with pytest.raises(ArchiveError, match=f"path {key!r} is none of a run's files"):
        archive.read(packed)
    with pytest.raises(ValueError, match="is none of a run's files"):
        archive.pack(tmp_path / "again" / ARCHIVE_NAME, {key: packed.parent / "x.json"})


def test_unpacking_never_writes_through_a_link_out_of_the_destination(tmp_path: Path) -> None:
    """A destination whose ``records`` is a link elsewhere: each key is a relative path below it, yet the
    files went where the link points. They are refused now, before any file is written."""
    packed = _archive(tmp_path / "sent" / ARCHIVE_NAME, [("records/0/result.json", COMPLETED_RECORD)])
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "records").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ArchiveError,
                       match=r"path 'records/0/result.json' leads outside .*out \(through a link"):
        archive.unpack(packed, tmp_path / "out")
    assert list((tmp_path / "elsewhere").iterdir()) == []
    written, _ = archive.unpack(packed, tmp_path / "inside")  # a destination without such a link
    assert written == [tmp_path / "inside" / "records" / "0" / "result.json"]


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


@pytest.mark.parametrize("deep", [_nested(60, [0] * 100_000),
                                  _nested(30, {f"k{i}": 0 for i in range(50_000)})])
def test_unpacking_writes_no_file_many_times_its_packed_size(tmp_path: Path, deep: Any) -> None:
    """--unpack re-indented every file as a run writes it: 100,000 zeros nested 60 deep (200 KB compact)
    unpacked to 12 MB, and an archive within its 256 MiB bound could unpack to gigabytes; a wide object
    nested 30 deep (a second case) grew the same way. A file now unpacks indented only within twice its
    compact size (a run's record: 1.3-1.5x), else compact; a run's record still unpacks indented."""
    packed = _archive(tmp_path / "sent" / ARCHIVE_NAME, [("records/0/trace.json", deep),
                                                         ("records/1/result.json", COMPLETED_RECORD)])
    written, _ = archive.unpack(packed, tmp_path / "out")
    trace, record = written
    compact = len(json.dumps(deep, separators=(",", ":")))
    assert trace.stat().st_size <= 2 * compact + 4096 and json.loads(trace.read_text()) == deep
    assert record.read_text() == json.dumps(COMPLETED_RECORD, indent=2) + "\n"


# --- Files that are not regular: named, never waited on -------------------------------------------------

def _finished_but_one(tmp_path: Path) -> Path:
    """A sweep of 4 planned jobs whose first 3 completed and whose last never started (no folder)."""
    sweep = killed_model_sweep(tmp_path / "sweep")
    write_record(sweep / "1", COMPLETED_RECORD)
    return sweep


@pytest.mark.parametrize("kind", ["link to nothing", "folder", "FIFO"])
def test_a_sweep_plan_that_is_no_file_is_named_not_read_as_no_plan(
        tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """multirun.yaml a link to nothing or a folder (or a FIFO) read as "no plan": the job that never
    started went unlisted and the table said 3 of 3 completed, exit 0. The plan is unreadable now, named,
    and the exit status 1."""
    sweep = _finished_but_one(tmp_path)
    marker = sweep / "multirun.yaml"
    marker.unlink()
    if kind == "link to nothing":
        marker.symlink_to(tmp_path / "gone.yaml")
    elif kind == "folder":
        marker.mkdir()
    else:
        os.mkfifo(marker)
    assert main([str(sweep), "--columns", "chunks,status"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "4 runs: 3 completed, 1 unreadable"
    assert f"unreadable: {marker}: " in err and "missing jobs cannot be named" in err
    assert [j.status for j in sweep_jobs(sweep)] == ["completed"] * 3 + ["unreadable"]
    assert _report().main([str(tmp_path), str(tmp_path / "out"), "--only", "sweep"]) == 1
    assert f"unreadable: {marker}: " in capsys.readouterr().err


@contextlib.contextmanager
def _released_after(fifo: Path, seconds: float) -> Iterator[None]:
    """After ``seconds``, open the writing end of ``fifo`` whenever a reader waits on it (the readers
    used to), so that such a reader gets an empty file and the test ends either way."""
    stop = threading.Event()

    def release() -> None:
        deadline = time.monotonic() + seconds
        while not stop.wait(0.05):
            if time.monotonic() < deadline:
                continue
            with contextlib.suppress(OSError):  # ENXIO: no reader waits
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


#: How long a reader may take before a FIFO counts as waited on.
_PATIENCE = 5.0


@pytest.mark.parametrize("name", ["config.yaml", "hydra.yaml", "overrides.yaml"])
def test_a_fifo_in_a_jobs_hydra_folder_never_makes_the_table_wait(tmp_path: Path, name: str) -> None:
    """A FIFO in place of an incomplete job's .hydra/config.yaml (the example; hydra.yaml and
    overrides.yaml likewise) hung the table, report.py and the end-of-sweep summary: opening a FIFO to
    read waits for a writer. Only regular files are opened now, so the job is listed at once, with what
    its other files tell."""
    sweep = killed_model_sweep(tmp_path / "sweep")
    fifo = sweep / "1" / ".hydra" / name
    fifo.unlink()
    os.mkfifo(fifo)
    with _released_after(fifo, _PATIENCE):
        start = time.monotonic()
        df = load(sweep)
        jobs = sweep_jobs(sweep)
        took = time.monotonic() - start
    assert took < _PATIENCE, f"waited on {fifo}"
    assert list(df["status"]) == ["completed", "incomplete", "completed", "missing"]
    assert [j.status for j in jobs] == ["completed", "incomplete", "completed", "missing"]
    incomplete = df.iloc[1]
    if name != "config.yaml":
        assert incomplete["chunks"] == 2  # from the config it still has
    if name != "hydra.yaml":
        assert incomplete["model"] == "gcn"  # from its choices


def test_a_fifo_named_as_a_record_or_an_archive_is_refused_at_once(tmp_path: Path) -> None:
    """load_record, archive.read and completed_record on a FIFO used to wait for a writer; each is
    refused at once now, naming what the file is."""
    for name in ("result.json", ARCHIVE_NAME):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        with _released_after(fifo, _PATIENCE):
            start = time.monotonic()
            with pytest.raises(NotRegularFileError, match=f"{fifo} is a FIFO, not a regular file"):
                (load_record if name == "result.json" else archive.read)(fifo)
            took = time.monotonic() - start
        assert took < _PATIENCE, f"waited on {fifo}"


@pytest.mark.parametrize("kind", ["FIFO", "link loop", "link to nothing"])
def test_a_jobs_record_that_cannot_be_read_is_one_unreadable_row_naming_why(
        tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A job's result.json that is a link loop crashed the table (RuntimeError: Symlink loop, from
    resolve()); a FIFO (or a link to nothing) there was listed "incomplete: no result.json". Each is one
    unreadable row now, naming the file and why; resume runs the job again."""
    sweep = killed_model_sweep(tmp_path / "sweep")
    record = sweep / "1" / "result.json"
    if kind == "FIFO":
        os.mkfifo(record)
    elif kind == "link loop":
        record.symlink_to(record)
    else:
        record.symlink_to(tmp_path / "gone.json")
    why = {"FIFO": f"NotRegularFileError: [Errno 22] {record} is a FIFO, not a regular file",
           "link loop": "OSError: [Errno 40] Too many levels of symbolic links",
           "link to nothing": "FileNotFoundError: [Errno 2] No such file or directory"}[kind]
    with _released_after(record, _PATIENCE) if kind == "FIFO" else contextlib.nullcontext():
        df = load(sweep)
        jobs = sweep_jobs(sweep)
        assert main([str(sweep), "--columns", "status"]) == 1
        cfg = OmegaConf.to_container(make_cfg("chunks=2"), resolve=True)
        assert completed_record(sweep / "1", cfg)[1].startswith(f"previous record unreadable ({why}")
    assert list(df["status"]) == ["completed", "unreadable", "completed", "missing"]
    assert df["path"][1] == str(record) and df["error"][1].startswith(why)
    assert [j.status for j in jobs] == ["completed", "unreadable", "completed", "missing"]
    assert jobs[1].error.startswith(why)
    err = capsys.readouterr().err
    assert f"unreadable: {record}: {why}" in err and "Traceback" not in err


def _alias_bomb(levels: int = 6, width: int = 10) -> str:
    """A few hundred bytes of YAML whose aliases of aliases expand to ``width ** levels`` nodes."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", ["config.yaml", "hydra.yaml", "overrides.yaml"])
def test_a_yaml_alias_bomb_in_a_jobs_hydra_folder_is_refused_at_once(tmp_path: Path, name: str) -> None:
    """A 350-byte alias bomb in an incomplete job's .hydra/config.yaml made the table read for minutes
    and gigabytes (OmegaConf expands every alias). Hydra writes no alias: a file with one is refused
    before anything is built, and the job is listed at once, with what its other files tell."""
    sweep = killed_model_sweep(tmp_path / "sweep")
    bomb = _alias_bomb()
    assert len(bomb) < 400
    (sweep / "1" / ".hydra" / name).write_text(bomb)
    start = time.monotonic()
    df = load(sweep)
    jobs = sweep_jobs(sweep)
    assert time.monotonic() - start < _PATIENCE
    assert list(df["status"]) == ["completed", "incomplete", "completed", "missing"]
    assert [j.status for j in jobs] == ["completed", "incomplete", "completed", "missing"]
    assert not any(str(c).startswith("cfg.a") for c in df.columns)
    from pipegnn.results.sweep import read_hydra_file

    with pytest.raises(ValueError, match=r"holds a YAML alias \(\*a0\), which no Hydra file does"):
        read_hydra_file(sweep / "1" / ".hydra" / name)


@pytest.mark.parametrize("text, why", [("a: !!set {x}\n", "holds a value of type set"),
                                       ("a: !!binary aGk=\n", "holds a value of type bytes"),
                                       ("a: !!timestamp 2026-12-05\n", "holds a value of type date"),
                                       ("just text\n", "holds a str, not a config"),
                                       ("~: 1\n", "holds a key None, which no config does")])
def test_a_hydra_file_holds_only_what_a_config_holds(tmp_path: Path, text: str, why: str) -> None:
    """Hydra files are read with OmegaConf's YAML loader into plain data (without OmegaConf's nodes, which
    refused other values): a value no config holds is refused as OmegaConf refused it, named."""
    from pipegnn.results.hydra_files import read_hydra_file

    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(ValueError, match=why):
        read_hydra_file(tmp_path / "config.yaml")
    (tmp_path / "empty.yaml").write_text("")
    assert read_hydra_file(tmp_path / "empty.yaml") == {}


def test_a_jobs_override_list_is_read_by_libyaml_within_the_same_bounds(tmp_path: Path) -> None:
    """A listing reads every job's .hydra/overrides.yaml, which no budget covers: 200 folders of 64 KiB
    lists took 68 s with the pure-Python loader (16 s now). They are parsed by libyaml (a list of text),
    within the same size bound, aliases refused; a file that is no list of scalars is no override list."""
    from pipegnn.results.hydra_files import MAX_YAML_BYTES, read_override_list

    path = tmp_path / "overrides.yaml"
    lines = [f"- a{i}=1" for i in range(6_000)]
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < MAX_YAML_BYTES
    assert read_override_list(path) == [f"a{i}=1" for i in range(6_000)]
    path.write_text("a: [1]\n")
    assert read_override_list(path) is None
    path.write_text(_alias_bomb())
    with pytest.raises(ValueError, match="holds a YAML alias"):
        read_override_list(path)


def test_incomplete_jobs_configs_are_read_within_one_budget(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Twelve incomplete jobs whose .hydra files lay just under their size bound took minutes to list (each
    file bounded, their count not): one listing parses at most MAX_INCOMPLETE_CONFIG_BYTES of them, and an
    incomplete job past it is listed without its config columns; a second case: within it, all are read."""
    from pipegnn.results import sweep as sweep_module

    sweep = killed_model_sweep(tmp_path / "sweep")
    job = next(j for j in sweep_jobs(sweep) if j.status == "incomplete")
    assert job.num == 1 and job.config and job.choices  # within the budget: read
    monkeypatch.setattr(sweep_module, "MAX_INCOMPLETE_CONFIG_BYTES", 100)
    read = sweep_module.read_hydra_file

    def unread(path: Path) -> Any:
        assert path.parent.parent.name != "1" or path.name == "overrides.yaml", f"{path} read past the budget"
        return read(path)

    monkeypatch.setattr(sweep_module, "read_hydra_file", unread)
    job = next(j for j in sweep_jobs(sweep) if j.status == "incomplete")
    assert job.num == 1 and job.config == {} and job.choices == {}


def test_jobs_override_lists_are_read_once_within_one_budget(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """100 recorded jobs whose .hydra/overrides.yaml lay at their 64 KiB bound took 4.9 s to list (each
    list bounded, their count not; every list read twice): a listing reads each job's list once, and at
    most MAX_OVERRIDE_LIST_BYTES of them; a job past it is listed by its folder's name, as one without the
    file, and its planned twin is not listed as missing (its folder is the plan's)."""
    from pipegnn.results import sweep as sweep_module

    sweep = killed_model_sweep(tmp_path / "sweep")
    read = sweep_module.read_override_list
    reads: list[Path] = []

    def counted(path: Path) -> Any:
        reads.append(path)
        return read(path)

    monkeypatch.setattr(sweep_module, "read_override_list", counted)
    jobs = sweep_jobs(sweep)
    assert [j.overrides for j in jobs] == ["chunks=2 model=gat", "chunks=2 model=gcn", "chunks=8 model=gat",
                                           "chunks=8 model=gcn"]
    assert sorted(reads) == sorted(sweep / n / ".hydra" / "overrides.yaml" for n in "012"), reads  # once each
    reads.clear()
    monkeypatch.setattr(sweep_module, "MAX_OVERRIDE_LIST_BYTES", 40)  # one list of about 30 bytes
    jobs = sweep_jobs(sweep)
    assert len(reads) == 1 and [j.status for j in jobs] == ["completed", "incomplete", "completed", "missing"]
    assert sum(j.overrides == j.directory.name for j in jobs[:3]) == 2  # the two lists past the budget
    # one budget over every folder a listing names (five namings of one 128-job folder took 82 s, one 18 s)
    reads.clear()
    monkeypatch.setattr(sweep_module, "MAX_OVERRIDE_LIST_BYTES", 8 << 20)
    assert len(load([sweep, sweep / "0", sweep / "1", sweep / "2"])) == 4
    assert sorted(reads) == sorted(set(reads)), reads  # each list read once over the four folders


@pytest.mark.parametrize("levels", [40, 60])
def test_relative_interpolations_are_not_resolved_past_their_bound(tmp_path: Path, levels: int) -> None:
    """An 855-byte config.yaml of relative references doubling (``a1: ${.a0}${.a0}``) hung the listing (each
    was counted as 4 characters, and OmegaConf resolved them in exponential time); a longer chain (a second
    case) too. A relative reference is not followed by the bound now: the config is kept as written."""
    sweep = killed_model_sweep(tmp_path / "sweep")
    chain = "x:\n  a0: aaaaaaaaaaaaaaaa\n" + "".join(f"  a{i}: ${{.a{i - 1}}}${{.a{i - 1}}}\n"
                                                      for i in range(1, levels))
    (sweep / "1" / ".hydra" / "config.yaml").write_text(chain)
    start = time.monotonic()
    jobs = sweep_jobs(sweep)
    assert time.monotonic() - start < _PATIENCE
    assert next(j for j in jobs if j.status == "incomplete").config["x"]["a1"] == "${.a0}${.a0}"


def test_hard_links_to_one_record_are_one_row(tmp_path: Path) -> None:
    """2,000 hard links to one 150 KB record (9,500 config keys) took 58 s and 3.2 GB to list, one row a
    link, while symbolic links were one row: a file is listed once, whichever link names it, hard links to
    an archive (a second case) too."""
    write_record(tmp_path / "runs" / "a", COMPLETED_RECORD)
    for name in "bcd":
        (tmp_path / "runs" / name).mkdir()
        os.link(tmp_path / "runs" / "a" / "result.json", tmp_path / "runs" / name / "result.json")
    (tmp_path / "runs" / "e").symlink_to(tmp_path / "runs" / "a")
    df = load(tmp_path / "runs")
    assert list(df["path"]) == [str(tmp_path / "runs" / "a" / "result.json")]
    assert len(load([tmp_path / "runs"] * 500 + [tmp_path / "runs" / "e"])) == 1  # a folder given again
    archive.pack(tmp_path / "packed" / "records.jsonl.gz", archive.run_files(tmp_path / "runs" / "a"))
    (tmp_path / "packed" / "again").mkdir()
    os.link(tmp_path / "packed" / "records.jsonl.gz", tmp_path / "packed" / "again" / "records.jsonl.gz")
    assert len(load(tmp_path / "packed")) == 1


def test_a_listing_fills_at_most_its_table_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Distinct records each within every bound of one record filled 19 million table cells (2,000 records
    of 9,500 config keys: 58 s, 3.2 GB): a listing stops past MAX_TABLE_CELLS with one line, exit 2, and
    (a second case) the records of an archive count as its rows are made, not after."""
    from pipegnn.results import table

    for name in "abc":
        write_record(tmp_path / "runs" / name, COMPLETED_RECORD)
    cells = len(load(tmp_path / "runs" / "a").columns.drop("path")) + 1
    assert len(load(tmp_path / "runs")) == 3
    monkeypatch.setattr(table, "MAX_TABLE_CELLS", 2 * cells)
    with pytest.raises(table.TableTooLarge, match="more than .* table cells .* list fewer folders"):
        load(tmp_path / "runs")
    assert main([str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "table cells" in err and "c" + os.sep + "result.json" in err
    write_record(tmp_path / "runs" / "d", COMPLETED_RECORD)
    archive.pack(tmp_path / "packed" / "records.jsonl.gz", archive.run_files(tmp_path / "runs"))
    made = []
    real = table._record_row
    monkeypatch.setattr(table, "_record_row", lambda *a: (made.append(a[0]), real(*a))[1])
    with pytest.raises(table.TableTooLarge):
        load(tmp_path / "packed")
    assert len(made) == 3  # the third of four rows past the bound, then no more


def test_a_yaml_alias_bomb_as_a_sweeps_plan_is_an_unreadable_plan(tmp_path: Path) -> None:
    sweep = _finished_but_one(tmp_path)
    (sweep / "multirun.yaml").write_text(_alias_bomb())
    start = time.monotonic()
    df = load(sweep)
    assert time.monotonic() - start < _PATIENCE
    assert list(df["status"]) == ["completed"] * 3 + ["unreadable"]
    assert "holds a YAML alias" in df["error"].iloc[-1]


# --- Every outside file bounded in size and count before it is built ------------------------------------

@pytest.mark.parametrize("sweep_override, reason", [
    ("train.seed=range(0,1000000)", "plans more than 10,000 jobs (at train.seed, of more than 10,000"),
    ("train.seed=range(0,1000)", "plans more than 10,000 jobs (at train.seed, of 1,000 values)"),  # product
    ("train.seed=range(0,50)", "more than 500,000 overrides in all"),  # 5,000 jobs of 250 keys and more
    ("train.seed=range(0,49)", "characters in all, more than 20,000,000"),  # 4,900 jobs, a 5,000-char value
])
def test_a_plan_of_a_million_jobs_is_unreadable_not_expanded(tmp_path: Path, sweep_override: str,
                                                            reason: str) -> None:
    """range(0,1000000) in a multirun.yaml ran the table past 5 minutes and 2.8 GB; two large ranges whose
    product is huge (a second case), under a memory cap, read as four completed runs; 10,000 jobs of
    thousands of keys each ran past 5 minutes working out their folders (a third: 5,000 jobs of 250 keys),
    and 10,000 jobs holding a 50,000-character value took 2.5 GB (a fourth: 4,900 of 5,000).
    The plan is counted before it is expanded: one unreadable row naming it, at once."""
    sweep = _finished_but_one(tmp_path)
    plan = OmegaConf.load(sweep / "multirun.yaml")
    extra = [sweep_override] if "1000000" in sweep_override else \
        [sweep_override, "chunks=range(0,1000)"] if "1000)" in sweep_override else \
        [sweep_override, "chunks=range(0,50)", *(f"+k{i}=0" for i in range(250))] if "50)" in sweep_override \
        else [sweep_override, "chunks=range(0,50)", "+long=" + "x" * 5_000]
    plan.hydra.overrides.task = [*plan.hydra.overrides.task, *extra]
    OmegaConf.save(plan, sweep / "multirun.yaml")
    start = time.monotonic()
    df = load(sweep)
    assert time.monotonic() - start < _PATIENCE
    assert df["status"].iloc[-1] == "unreadable" and reason in df["error"].iloc[-1], df["error"].iloc[-1]


def test_a_plan_within_its_bounds_names_its_missing_jobs_in_seconds(tmp_path: Path) -> None:
    """Each missing job's overrides were parsed whole for its columns: 10,000 jobs of 49 keys, within every
    bound, took a minute. Each distinct override is parsed once: 1,997 missing jobs of 153 keys are named,
    each with its settings, at once."""
    sweep = _finished_but_one(tmp_path)
    plan = OmegaConf.load(sweep / "multirun.yaml")
    plan.hydra.overrides.task = [*plan.hydra.overrides.task, "train.seed=range(0,50)", "chunks=range(0,20)",
                                 *(f"+k{i}={i}" for i in range(150))]
    OmegaConf.save(plan, sweep / "multirun.yaml")
    start = time.monotonic()
    jobs = sweep_jobs(sweep)
    assert time.monotonic() - start < _PATIENCE
    missing = [j for j in jobs if j.status == "missing"]
    assert len(jobs) == 2_000 and len(missing) == 2_000 - 3  # jobs 0-2 started in their planned folders
    assert missing[-1].config is not None and missing[-1].config["k149"] == 149 \
        and missing[-1].config["train"] == {"seed": 49}


def test_a_record_or_trace_larger_than_any_run_writes_is_refused_unread(tmp_path: Path) -> None:
    """A sparse 20 GB result.json ended in a MemoryError traceback: it is an unreadable row now, read no
    further than its bound; a trace.json of the same (a second case) is one JSONFileError."""
    from pipegnn.jsonfile import JSONFileError, read_json

    sweep = _finished_but_one(tmp_path)
    record = sweep / "2" / "result.json"
    with open(record, "r+b") as f:
        f.truncate(20 << 30)
    start = time.monotonic()
    df = load(sweep)
    assert time.monotonic() - start < _PATIENCE
    assert df["status"].iloc[2] == "unreadable"
    assert "holds more than 8,388,608 bytes" in df["error"].iloc[2], df["error"].iloc[2]
    trace = tmp_path / "trace.json"
    with open(trace, "wb") as f:
        f.truncate(20 << 30)
    with pytest.raises(JSONFileError, match="holds more than 67,108,864 bytes"):
        read_json(trace)


def test_an_archive_counting_a_million_files_is_refused_before_its_lines(tmp_path: Path) -> None:
    """A 2.6 MB archive of 1,048,576 tiny records took 3 minutes and 4.7 GB: a header counting more files
    than `MAX_FILES` is refused before any line is read."""
    header = {"format": "pipegnn.records", "version": 1, "files": 1 << 20, "checksum": "crc32:00000000"}
    packed = tmp_path / "sent" / ARCHIVE_NAME
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(json.dumps(header).encode() + b"\n"))
    with pytest.raises(ArchiveError, match="the header counts 1048576 files, expected a number from 0 to"):
        archive.read(packed)


def _line(key: str, value: Any) -> bytes:
    return json.dumps({"path": key, "json": value}).encode() + b"\n"


def _split_archive(first: Path, parts: list[list[bytes]], files: list[int] | None = None) -> list[Path]:
    """An archive split into ``parts`` (each its lines), with headers that fit each part (their counts of
    files ``files`` when given) and one ``whole``: as a packer that checked nothing across its parts would
    write it."""
    whole = stream_checksum([line for lines in parts for line in lines])
    written = []
    for number, lines in enumerate(parts, 1):
        header = {"format": "pipegnn.records", "version": 1, "checksum": stream_checksum(lines),
                  "files": len(lines) if files is None else files[number - 1], "part": number,
                  "parts": len(parts), "whole": whole}
        path = archive.part_name(first, number)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(json.dumps(header).encode() + b"\n" + b"".join(lines)))
        written.append(path)
    return written


@pytest.mark.parametrize("keys, problem", [
    ([["records/0/result.json"], ["records/0/result.json"]],
     "line 2: path 'records/0/result.json' out of order or again"),
    ([["x/result.json", "y/result.json"], ["y/result.json/trace.json"]],
     "line 2: path 'y/result.json/trace.json' puts a folder where the path 'y/result.json' is a file"),
])
def test_a_key_again_or_a_folder_of_another_across_parts_is_a_damaged_archive(
        tmp_path: Path, keys: list[list[str]], problem: str) -> None:
    """The keys of a split archive were checked within each part: a key in two parts was written twice by
    --unpack (the second silently replacing the first), and a key that is a folder of another part's key
    failed halfway (errno 17, files written). The parts are one archive: refused before anything is
    written, naming the part."""
    split = _split_archive(tmp_path / "sent" / ARCHIVE_NAME,
                           [[_line(key, COMPLETED_RECORD) for key in part] for part in keys])
    with pytest.raises(ArchiveError) as raised:
        archive.unpack(split[0], tmp_path / "out")
    assert raised.value.path == split[1] and raised.value.reason == problem
    assert not (tmp_path / "out").exists()
    done = subprocess.run([sys.executable, "-m", "pipegnn.results.archive", "--unpack", str(split[0]),
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert done.returncode == 2 and done.stderr == f"error: {split[1]}: {problem}\n"
    assert not (tmp_path / "out").exists()
    df = load(split[0].parent)
    assert df[["path", "status", "error"]].values.tolist() == [
        [str(split[0]), "unreadable", f"{split[1].name}: {problem}"]]


def test_a_split_archive_is_bounded_over_all_its_parts(tmp_path: Path) -> None:
    """Each part of a split archive was bounded on its own: 12 parts of 2.5 MB in all inflated to 2.6 GB
    (pyarrow's MemoryError), and --unpack wrote 803 MB from 830 KB. The bounds are the whole archive's:
    three parts of 100 MiB each (each within `MAX_INFLATED_BYTES`) are one unreadable row, --unpack
    writes nothing (here with at most 3 GiB of address space); and parts whose headers count more than
    `MAX_FILES` files in all are refused before a line is read."""
    filler = "x" * ((8 << 20) - 100)  # a line just within MAX_LINE_BYTES
    lines = [[_line(f"records/{p}{i:02d}/result.json", filler) for i in range(14)] for p in range(1, 4)]
    assert all(100 << 20 < sum(map(len, part)) < archive.MAX_INFLATED_BYTES for part in lines)
    split = _split_archive(tmp_path / "sent" / ARCHIVE_NAME, lines)
    assert sum(p.stat().st_size for p in split) < 4 << 20
    reason = (f"the archive (all its parts) inflates to more than {archive.MAX_INFLATED_BYTES:,} bytes, more "
              "than a sweep's records: not read (a decompression bomb?)")
    done = _limited("pipegnn.results", str(split[0].parent), "--columns", "status")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1 and f"unreadable: {split[0]}: {split[2].name}: {reason}" in done.stderr
    done = _limited("pipegnn.results.archive", "--unpack", str(split[0]), str(tmp_path / "out"))
    assert done.returncode == 2 and done.stderr == f"error: {split[2]}: {reason}\n"
    assert not (tmp_path / "out").exists()
    # counted files: 2 x 40,000, each within MAX_FILES, no line needed
    counted = _split_archive(tmp_path / "counted" / ARCHIVE_NAME, [[], []], files=[40_000, 40_000])
    with pytest.raises(ArchiveError) as raised:
        archive.read(counted[0])
    assert raised.value.path == counted[0] and raised.value.reason == (
        f"part 1 of 2: the parts' headers count 80,000 files in all, more than {archive.MAX_FILES:,}: "
        "not read")


def test_a_pack_holding_more_than_a_reader_takes_is_refused_unwritten(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What readers refuse is never written: more files than `MAX_FILES` (here 3, of 4) is one error."""
    for job in range(4):
        write_record(tmp_path / "sweep" / "records" / str(job), COMPLETED_RECORD)
    monkeypatch.setattr(archive, "MAX_FILES", 3)
    with pytest.raises(ValueError, match="4 files of [0-9,]+ bytes, more than an archive holds \\(3 files"):
        archive.pack(tmp_path / "out" / ARCHIVE_NAME, archive.run_files(tmp_path / "sweep"))
    assert not (tmp_path / "out").exists()


def test_a_part_beside_an_archive_that_is_not_split_is_damage_not_ignored(tmp_path: Path) -> None:
    """An archive is read by its first part: a ``records-2.jsonl.gz`` beside one that is not split (left
    from an earlier pack, or copied in) is named, not silently left unread."""
    packed = _archive(tmp_path / "sent" / ARCHIVE_NAME, [("records/0/result.json", COMPLETED_RECORD)])
    _archive(tmp_path / "sent" / "records-2.jsonl.gz", [("records/1/result.json", COMPLETED_RECORD)])
    reason = "records-2.jsonl.gz is beside it, but the archive is not split: a part left from an earlier pack"
    with pytest.raises(ArchiveError) as raised:
        archive.read(packed)
    assert raised.value.path == packed and raised.value.reason.startswith(reason)
    df = load(packed.parent)
    assert df["status"].tolist() == ["unreadable"] and df["error"][0].startswith(reason)


def test_a_folder_whose_name_is_no_utf8_is_a_row_not_a_crash(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A run folder named with bytes that are no UTF-8 trained, but the table died in pyarrow
    (UnicodeEncodeError). Its row names it with the bytes escaped; so does the error of an unreadable
    record in such a folder (a second case)."""
    good = os.fsdecode(os.fsencode(tmp_path) + b"/run\xff")
    bad = os.fsdecode(os.fsencode(tmp_path) + b"/cut\xfe")
    write_record(good, completed({"chunks": 2}))
    os.makedirs(bad)
    Path(bad, "result.json").write_text('{"status": "comp')
    df = load(tmp_path)
    assert df["path"].tolist() == [f"{tmp_path}/cut\\udcfe/result.json", f"{tmp_path}/run\\udcff/result.json"]
    assert df["status"].tolist() == ["unreadable", "completed"]
    assert df["error"].iloc[0].startswith("JSONDecodeError")
    assert main([str(tmp_path), "--columns", "status"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "cut\\udcfe/result.json: JSONDecodeError" in err


def test_interpolations_of_interpolations_are_not_resolved_past_a_bound(tmp_path: Path) -> None:
    """Twenty lines of ``aN: ${aN-1}${aN-1}`` (400 bytes) in an incomplete job's .hydra/config.yaml made
    the table run past two minutes (each line doubles); an interpolation cycle (a second case) is no
    trouble either. Such a file is read as written, at once."""
    sweep = killed_model_sweep(tmp_path / "sweep")
    chain = "a0: x\n" + "".join(f'a{i}: "${{a{i - 1}}}${{a{i - 1}}}"\n' for i in range(1, 40))
    (sweep / "1" / ".hydra" / "config.yaml").write_text(chain + 'b: "${c}"\nc: "${b}"\n')
    start = time.monotonic()
    df = load(sweep)
    assert time.monotonic() - start < _PATIENCE
    assert df["status"].tolist()[:3] == ["completed", "incomplete", "completed"]


def test_a_record_whose_config_holds_a_million_keys_is_unreadable(tmp_path: Path) -> None:
    """A 6.6 MB result.json (under the size bound) whose config held 480,000 keys ended in a MemoryError
    (a column per key); a record's config holds at most 10,000 keys now."""
    from pipegnn.run_record import MAX_CONFIG_KEYS

    write_record(tmp_path / "0", completed({"chunks": 2, "x": {f"k{i}": 0 for i in range(MAX_CONFIG_KEYS)}}))
    write_record(tmp_path / "1", completed({"chunks": 2}))
    df = load(tmp_path)
    assert df["status"].tolist() == ["unreadable", "completed"]
    assert "'config' holds more than 10,000 keys" in df["error"].iloc[0]


@pytest.mark.parametrize("section", ["config", "final"])
def test_a_record_nested_past_any_run_is_unreadable(tmp_path: Path, section: str) -> None:
    """A result.json whose config nested 600 objects deep (the example; a second case: its ``final``) ended
    the reproduction check (``--recompose``) in a RecursionError; a record nests at most 64 levels now,
    and the table and the check name the record instead."""
    from pipegnn.results.reproduce import recompose

    deep: Any = 0
    for _ in range(600):
        deep = {"x": deep}
    record = completed({"chunks": 2, "x": deep} if section == "config" else {"chunks": 2})
    if section == "final":
        record = {**record, "final": {**record["final"], "x": deep}}
    write_record(tmp_path / "0", record)
    write_record(tmp_path / "1", completed({"chunks": 2}))
    df = load(tmp_path)
    assert df["status"].tolist() == ["unreadable", "completed"]
    assert f"'{section}' nests objects and arrays more than 64 deep" in df["error"].iloc[0]
    assert "more than 64 deep" in (recompose(tmp_path)[0].error or "")


def test_a_planned_folder_name_no_file_system_holds_is_a_missing_job(tmp_path: Path) -> None:
    """A plan whose ${hydra.job.override_dirname} of long values names a folder past 255 bytes ended the
    table in an OSError (File name too long); such a job is missing, at once."""
    sweep = _finished_but_one(tmp_path)
    plan = OmegaConf.load(sweep / "multirun.yaml")
    plan.hydra.sweep.subdir = "${hydra.job.override_dirname}"
    plan.hydra.overrides.task = [*plan.hydra.overrides.task, "+note=" + "x" * 300]
    OmegaConf.save(plan, sweep / "multirun.yaml")
    df = load(sweep)
    assert "missing" in df["status"].tolist(), df[["path", "status"]]
