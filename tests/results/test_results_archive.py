"""pipegnn/results/archive.py: a sweep's records and traces as one records.jsonl.gz, packed with the same
bytes every time, unpacked byte for byte (but for the per-epoch digits packing drops), read by load() as it
reads the files, refused when damaged."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pipegnn.results import archive, load
from pipegnn.results.archive import ARCHIVE_NAME, ArchiveError
from pipegnn.runs.record_writes import write_record

from tests.helpers import COMMITTED_RESULTS, ROOT


def _record(job: int, status: str = "completed") -> dict:
    """A small record: a config with the sweep's keys, accuracies, timing, one epoch; text and numbers
    that JSON writers spell differently (non-ASCII, NaN, exponents, nesting)."""
    return {"status": status, "error": None if status == "completed" else "RuntimeError: boom\nline 2",
            "config": {"chunks": 2 ** (job % 4), "microbatch": {"halo": "exact", "partition": "metis"},
                       "train": {"seed": job, "epochs": 1}, "engine": {"devices": ["cpu", "cpu"]},
                       "note": "métis ≠ naïve"},
            "choices": {"dataset": "cora", "model": "gat", "framework": "pyg", "engine": "gpipe"},
            "final": {"train_acc": 0.9, "val_acc": 0.5, "test_acc": 0.8 + job / 1000, "best_val_acc": 0.5,
                      "test_acc_at_best_val": 0.81, "best_val_loss": float("nan")},
            "timing": {"epoch_time_median_s": 1.5e-05 * (job + 1), "total_s": 12.0},
            "epochs": [{"epoch": 0, "loss": 1.098612, "train_acc": 0.9, "val_acc": 0.5, "test_acc": 0.8,
                        "pipeline": {"stages": [{"busy_s": 1.5e-05}]}}]}


def _trace(job: int) -> dict:
    return {"traceEvents": [{"name": "F0", "cat": "forward", "ph": "X", "ts": 0.0, "dur": 12.5 + job,
                             "pid": 0, "tid": 0, "args": {"stage": 0, "micro_batch": 0}}],
            "displayTimeUnit": "ms", "otherData": {"epoch": 1, "engine": "gpipe"}}


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A results folder as report.py wrote them: records/<job>/result.json (jobs 2 and 10, so that
    natural order matters), trace.json beside some, a failed run, and a file that is no record."""
    folder = tmp_path / "preset"
    for job in (0, 1, 2, 10):
        write_record(folder / "records" / str(job), _record(job, "failed" if job == 1 else "completed"))
        if job in (0, 2):
            write_record(folder / "records" / str(job), _trace(job), "trace.json")
    (folder / "records" / "0" / "train.log").write_text("not packed")
    return folder


def _json_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*.json"))}


def _pack(folder: Path, archive_path: Path | None = None) -> Path:
    files = archive.run_files(folder, beside=("trace.json",))
    return archive.pack(archive_path or folder / ARCHIVE_NAME, files)


def test_round_trip_gives_the_files_back_byte_for_byte(sweep: Path, tmp_path: Path) -> None:
    packed = _pack(sweep)
    contents = archive.read(packed)
    files = _json_files(sweep)
    assert list(contents.paths) == ["records/0/result.json", "records/0/trace.json", "records/1/result.json",
                                    "records/2/result.json", "records/2/trace.json", "records/10/result.json"]
    assert list(contents.paths) == list(contents.files) and contents.unreadable == {}
    assert set(files) == set(contents.paths)  # train.log stays out
    assert contents.files["records/2/trace.json"] == _trace(2)
    written, unreadable = archive.unpack(packed, tmp_path / "out")
    assert unreadable == {} and sorted(written) == sorted(tmp_path / "out" / key for key in files)
    assert _json_files(tmp_path / "out") == files
    # only the files asked for
    assert archive.read(packed, keep=lambda key: key.endswith("/trace.json")).files.keys() == {
        "records/0/trace.json", "records/2/trace.json"}
    written, _ = archive.unpack(packed, tmp_path / "one", keep={"records/10/result.json"})
    assert written == [tmp_path / "one" / "records" / "10" / "result.json"]


def test_a_records_per_epoch_entries_are_packed_compact_and_nothing_else(tmp_path: Path) -> None:
    record = _record(3)
    record["epochs"] = [{"epoch": 0, "loss": 1.0986122886681098, "val_acc": 0.12999999523162842,
                         "epoch_time_s": 0.2508774510024523, "ended_at": 1795903105.4852114,
                         "nan": float("nan"),
                         "pipeline": {"bubble": 2 / 3, "stages": [
                             {"forward_s": 0.020421154007635778, "busy_s": 3.3315729997411836e-07,
                              "communication_s": 0.0}, {"busy_s": 0.04322143997342209}]}}]
    record["pipeline"] = {"stages": [{"forward_s": 0.020421154007635778, "busy_s": 0.25}]}
    record["timing"]["total_s"] = 12.345678901234
    write_record(tmp_path / "run" / "records" / "3", record)
    write_record(tmp_path / "run" / "records" / "3", _trace(3) | {"otherData": {"x": 0.123456789}},
                 "trace.json")
    packed = _pack(tmp_path / "run")
    files = archive.read(packed).files
    epoch = files["records/3/result.json"]["epochs"][0]
    assert {k: v for k, v in epoch.items() if k != "nan"} == {
        "epoch": 0, "loss": 1.098612, "val_acc": 0.13, "epoch_time_s": 0.250877,
        "ended_at": 1795903105.485211,
        "pipeline": {"bubble": 0.666667, "stages": [{"busy_s": 0.0}, {"busy_s": 0.043221}]}}
    assert epoch["nan"] != epoch["nan"]
    assert archive.EPOCH_DECIMALS == 6 and archive.EPOCH_STAGE_KEYS == ("busy_s",)
    # the rest of the record, and traces, as the files hold them
    assert files["records/3/result.json"]["timing"]["total_s"] == 12.345678901234
    assert files["records/3/result.json"]["pipeline"] == record["pipeline"]
    assert files["records/3/trace.json"]["otherData"] == {"x": 0.123456789}
    # idempotent: the unpacked files pack into the same archive
    archive.unpack(packed, tmp_path / "again")
    assert _pack(tmp_path / "again", tmp_path / ARCHIVE_NAME).read_bytes() == packed.read_bytes()


def test_packing_the_same_files_gives_the_same_bytes(sweep: Path, tmp_path: Path) -> None:
    first = _pack(sweep, tmp_path / "a" / ARCHIVE_NAME).read_bytes()
    for file in sweep.rglob("*.json"):  # other times, and the files listed in another order
        os.utime(file, (1e9, 1e9))
    files = archive.run_files(sweep, beside=("trace.json",))
    second = archive.pack(tmp_path / "b" / "other.jsonl.gz", dict(reversed(files.items()))).read_bytes()
    assert first == second
    assert first[:2] == b"\x1f\x8b" and first[4:8] == bytes(4)  # gzip, mtime 0
    with pytest.raises(ValueError, match=r"other\.gz: an archive's name ends in \.jsonl\.gz"):
        archive.pack(tmp_path / "b" / "other.gz", files)
    assert first[3] & 0x08 == 0  # no file name in the header
    lines = gzip.decompress(first).split(b"\n")
    assert json.loads(lines[0]) == {"format": "pipegnn.records", "version": 1, "files": 6,
                                    "checksum": json.loads(lines[0])["checksum"]}
    assert all(b"\n" not in line and b": " not in line[:40] for line in lines)  # compact, one file a line


def test_load_reads_an_archive_as_it_reads_the_files(sweep: Path, tmp_path: Path) -> None:
    (sweep / "records" / "3").mkdir()
    (sweep / "records" / "3" / "result.json").write_text('{"status": "completed", "config": [1]}')
    (sweep / "records" / "4").mkdir()
    (sweep / "records" / "4" / "result.json").write_bytes(b'{"status": "comp')
    from_files = load(sweep / "records")
    packed = _pack(sweep)
    assert archive.read(packed).unreadable == {"records/4/result.json": from_files["error"][4]}
    from_archive = load(packed)
    pd.testing.assert_frame_equal(from_archive, from_files)
    assert from_files["status"].tolist() == ["completed", "failed", "completed", "unreadable", "unreadable",
                                             "completed"]
    # both forms in one folder: each run once; the folder of the archive alone; a folder of both forms
    pd.testing.assert_frame_equal(load(sweep), from_files)
    moved = tmp_path / "packed" / "preset"
    moved.mkdir(parents=True)
    packed.rename(moved / ARCHIVE_NAME)
    expected = from_files.assign(path=[p.replace(str(sweep), str(moved)) for p in from_files["path"]])
    pd.testing.assert_frame_equal(load(moved.parent), expected)
    both = load([moved.parent, sweep.parent / "preset" / "records"])
    assert len(both) == 2 * len(from_files) and set(both["path"]) == {*expected["path"], *from_files["path"]}


def test_the_command_lines_read_and_unpack_an_archive(sweep: Path, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    packed = tmp_path / "packed" / ARCHIVE_NAME
    done = subprocess.run([sys.executable, "-m", "pipegnn.results.archive", "--pack", str(sweep),
                           str(packed)], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0 and f"packed 6 files of {sweep} into {packed}" in done.stdout, done.stderr
    assert packed.read_bytes() == _pack(sweep, tmp_path / ARCHIVE_NAME).read_bytes()
    done = subprocess.run([sys.executable, "-m", "pipegnn.results.archive", "--unpack", str(packed),
                           str(tmp_path / "out")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0 and "wrote 6 files" in done.stdout, done.stderr
    assert _json_files(tmp_path / "out") == _json_files(sweep)
    table = subprocess.run([sys.executable, "-m", "pipegnn.results", str(packed.parent), "--columns",
                            "chunks,status"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert table.returncode == 1 and "failed: " in table.stderr  # job 1 failed, as from the files
    assert table.stdout.splitlines()[:5] == ["chunks  status", "     1  completed", "     2  failed",
                                             "     4  completed", "     4  completed"]


@pytest.fixture
def many(tmp_path: Path) -> Path:
    """A results folder of 12 runs (jobs 0-11, a trace beside every third) whose 100 epochs of random
    floats (6 decimals, as packed) compress to about 13 kB: split into parts below that."""
    import random

    folder = tmp_path / "many"
    for job in range(12):
        rng = random.Random(job)
        write_record(folder / "records" / str(job), _record(job) | {
            "epochs": [{"epoch": e, "loss": round(rng.random(), 6), "val_acc": round(rng.random(), 6)}
                       for e in range(100)]})
        if job % 3 == 0:
            write_record(folder / "records" / str(job), _trace(job), "trace.json")
    return folder


def _split(folder: Path, part_bytes: int, into: str = "split") -> list[Path]:
    files = archive.run_files(folder, beside=("trace.json",))
    return archive.parts(archive.pack(folder.parent / into / ARCHIVE_NAME, files, part_bytes=part_bytes))


@pytest.mark.parametrize("fraction", [0.6, 0.25, 0.01])
def test_a_large_archive_is_split_into_parts_of_whole_runs(many: Path, tmp_path: Path,
                                                           fraction: float) -> None:
    whole = _pack(many, tmp_path / "whole" / ARCHIVE_NAME)
    assert 5_000 < whole.stat().st_size < archive.MAX_PART_BYTES
    part_bytes = int(fraction * whole.stat().st_size)  # bounds relative to what this zlib makes
    split = _split(many, part_bytes)
    count = len(split)
    assert count >= 1 / fraction if fraction > 0.1 else count == 12  # else one run a part, the most
    assert [p.name for p in split] == [ARCHIVE_NAME, *(f"records-{n}.jsonl.gz" for n in range(2, count + 1))]
    assert sorted(p.name for p in split[0].parent.iterdir()) == sorted(p.name for p in split)
    if count < 12:  # else each run's part is larger than the bound
        assert all(p.stat().st_size <= part_bytes for p in split)
    paths = [[json.loads(line)["path"] for line in gzip.decompress(p.read_bytes()).splitlines()[1:]]
             for p in split]  # each part's keys
    assert [key for keys in paths for key in keys] == list(archive.read(whole).paths)  # in order
    assert archive.read(split[0]).paths == archive.read(whole).paths  # the first part reads them all
    if count > 1:
        assert list(archive.read(split[-1]).paths) == paths[-1]  # a later part alone: its own
    runs = [{key.rsplit("/", 1)[0] for key in keys} for keys in paths]
    assert sum(map(len, runs)) == 12  # a run's record and trace in one part
    headers = [json.loads(gzip.decompress(p.read_bytes()).split(b"\n")[0]) for p in split]
    assert [(h["part"], h["parts"]) for h in headers] == [(n, count) for n in range(1, count + 1)]
    assert len({h["whole"] for h in headers}) == 1
    # read as the whole archive is: by load, the command line's unpack
    expected = load(whole.parent).assign(path=lambda df: df["path"].str.replace("/whole/", "/split/"))
    pd.testing.assert_frame_equal(load(split[0].parent), expected)
    pd.testing.assert_frame_equal(load(split), expected)
    pd.testing.assert_frame_equal(load(split[0]), expected)  # the first part names them all
    if count > 1:  # a later part alone: its runs
        assert set(load(split[1])["path"]) == {str(split[0].parent / key) for key in paths[1]
                                               if key.endswith("/result.json")}
    done = subprocess.run([sys.executable, "-m", "pipegnn.results.archive", "--unpack", str(split[0]),
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0 and "wrote 16 files" in done.stdout, done.stderr
    assert _json_files(tmp_path / "out") == _json_files(many)
    written, _ = archive.unpack(split[0], tmp_path / "lib", keep={"records/11/result.json"})
    assert [p.relative_to(tmp_path / "lib").as_posix() for p in written] == ["records/11/result.json"]
    if count > 1:  # a later part alone: its files
        written, _ = archive.unpack(split[-1], tmp_path / "last")
        assert sorted(p.relative_to(tmp_path / "last").as_posix() for p in written) == sorted(paths[-1])
    # packed again unsplit: one file, the earlier parts gone
    assert _split(many, archive.MAX_PART_BYTES) == [split[0]]
    assert list(split[0].parent.iterdir()) == [split[0]] and split[0].read_bytes() == whole.read_bytes()


@pytest.mark.parametrize("damage, reason", [
    ("part lost", "part 1 of {n}: part 2 (records-2.jsonl.gz) is not beside it; a split archive is read "
                  "whole or not at all"),
    ("part left over", "records-{after}.jsonl.gz is beside it, but the archive has {n} parts: a part left "
                       "from an earlier pack, or of another archive; not read"),
    ("another pack's part", "part 1 of {n}: records-{n}.jsonl.gz is not part {n} of the same archive (its "
                            "part fields differ): parts of two packs; not read"),
    ("renamed", "part 1 of {n}: part 2 (records-2.jsonl.gz) is not beside it"),
])
def test_a_split_archive_is_read_whole_or_not_at_all(many: Path, tmp_path: Path, damage: str,
                                                     reason: str) -> None:
    part_bytes = _pack(many, tmp_path / "whole" / ARCHIVE_NAME).stat().st_size // 3
    split = _split(many, part_bytes)
    count = len(split)
    assert count >= 3
    if damage == "part lost":
        split[1].unlink()
    elif damage == "part left over":
        (split[0].parent / f"records-{count + 1}.jsonl.gz").write_bytes(split[2].read_bytes())
    elif damage == "another pack's part":  # job 11 failed in the other pack: another whole
        write_record(many / "records" / "11", _record(11, "failed"))
        other = _split(many, part_bytes, into="other")
        assert len(other) == count
        split[-1].write_bytes(other[-1].read_bytes())
    elif damage == "renamed":
        split[1].rename(split[1].with_name(f"records-{count + 2}.jsonl.gz"))
    reason = reason.format(n=count, after=count + 1)
    with pytest.raises(ArchiveError) as raised:
        archive.read(split[0])
    assert str(raised.value).startswith(f"{split[0]}: {reason}")
    rows = load(split[0].parent)  # one archive, named by its first part: one unreadable row
    assert rows[["path", "status"]].values.tolist() == [[str(split[0]), "unreadable"]]
    assert any(error.startswith(reason) for error in rows["error"])
    with pytest.raises(ArchiveError):  # every part refuses
        archive.read(split[-1])
    assert archive.main(["--unpack", str(split[0]), str(tmp_path / "out")]) == 2
    with pytest.raises(ArchiveError):
        archive.unpack(split[0], tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fields, reason", [
    ({"part": 2, "parts": 1, "whole": "crc32:0"}, "the header's part fields {'part': 2, 'parts': 1, 'whole': "
                                                  "'crc32:0'} are not a part of a split archive"),
    ({"part": True, "parts": 2, "whole": "crc32:0"}, "the header's part fields"),
    ({"parts": 2}, "the header's part fields {'parts': 2} are not a part"),
    ({"part": 1, "parts": 10 ** 9, "whole": "crc32:0"}, "the header's part fields"),
    ({"part": 2, "parts": 2, "whole": "crc32:0"}, "part 2 of 2 of a split archive, named otherwise than that "
                                                  "part (its name ends in -2.jsonl.gz)"),
])
def test_a_header_with_bad_part_fields_is_refused(sweep: Path, fields: dict, reason: str) -> None:
    packed = _pack(sweep)
    header, rest = gzip.decompress(packed.read_bytes()).split(b"\n", 1)
    packed.write_bytes(gzip.compress(json.dumps(json.loads(header) | fields).encode() + b"\n" + rest))
    with pytest.raises(ArchiveError) as raised:
        archive.read(packed)
    assert str(raised.value).startswith(f"{packed}: {reason}")
    with pytest.raises(ArchiveError, match="part"):
        archive.parts(packed)


def _rewrite(packed: Path, edit, checksum: bool = True) -> None:
    """Edit the lines of ``packed`` and compress them again, with a header whose count and checksum fit
    them when ``checksum`` (as a packer with a bug would write them), else the old header."""
    from pipegnn.integrity import stream_checksum

    header, *lines = gzip.decompress(packed.read_bytes()).split(b"\n")[:-1]
    lines = [line + b"\n" for line in edit(lines)]
    head = json.loads(header)
    if checksum:
        head.update(files=len(lines), checksum=stream_checksum(lines))
    packed.write_bytes(gzip.compress(json.dumps(head).encode() + b"\n" + b"".join(lines)))


@pytest.mark.parametrize("damage, reason", [
    ("truncated", "not a whole gzip stream (EOFError: Compressed file ended before the end-of-stream marker"),
    ("flipped", "not a whole gzip stream"),
    ("not gzip", "not a whole gzip stream (BadGzipFile: Not a gzipped file"),
    ("edited", "content checksum crc32:"),
    ("line lost", "5 whole lines after the header, which says 6"),
    ("bad JSON line", "line 3: JSONDecodeError: "),
    ("nested", "line 2: RecursionError: nested too deeply to parse"),
    ("outside", "line 2: path '../../evil.json' is not a relative path below the archive's folder"),
    ("twice", "line 3: path 'records/0/result.json' out of order or again"),
    ("not an entry", "line 2: not an entry (path and json, or path and unreadable)"),
    ("no header", "line 1 is not the header of a pipegnn.records archive"),
    ("deep", f"line 2: path '{'a/' * 30}'... of 80,011 characters and 40,001 names is longer than a run's "
             "file"),
    ("33 names", f"line 2: path '{'a/' * 30}'... of 75 characters and 33 names is longer than a run's file "
                 "(at most 1,024 characters, 32 names)"),
])
def test_a_damaged_archive_is_one_error_naming_it(sweep: Path, tmp_path: Path, damage: str,
                                                  reason: str) -> None:
    packed = _pack(sweep)
    data = packed.read_bytes()
    if damage == "truncated":
        packed.write_bytes(data[:len(data) // 2])
    elif damage == "flipped":
        # a byte of the trailer's CRC-32: every line inflates, the stream does not check out
        packed.write_bytes(data[:-6] + bytes([data[-6] ^ 0xFF]) + data[-5:])
    elif damage == "not gzip":
        packed.write_bytes(gzip.decompress(data))
    elif damage == "edited":
        _rewrite(packed, lambda lines: [lines[0].replace(b'"status":"completed"', b'"status":"completes"'),
                                        *lines[1:]], checksum=False)
    elif damage == "line lost":
        _rewrite(packed, lambda lines: lines[:-1], checksum=False)
    elif damage == "bad JSON line":
        _rewrite(packed, lambda lines: [lines[0], lines[1][:-10], *lines[2:]])
    elif damage == "nested":
        _rewrite(packed, lambda lines: [b'{"path":"a.json","json":' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
    elif damage == "outside":
        _rewrite(packed, lambda lines: [b'{"path":"../../evil.json","json":{}}'])
    elif damage == "twice":
        _rewrite(packed, lambda lines: [lines[0], lines[0]])
    elif damage == "not an entry":
        _rewrite(packed, lambda lines: [b'{"path":"records/0/result.json","json":{},"exec":"print(1)"}'])
    elif damage == "no header":
        packed.write_bytes(gzip.compress(b"{}\n"))
    elif damage == "deep":  # every folder of the key built: quadratic, a MemoryError (222 bytes gzipped)
        _rewrite(packed, lambda lines: [b'{"path":"' + b"a/" * 40_000 + b'result.json","json":{}}'])
    elif damage == "33 names":
        _rewrite(packed, lambda lines: [b'{"path":"' + b"a/" * 32 + b'result.json","json":{}}'])
    with pytest.raises(ArchiveError) as raised:
        archive.read(packed)
    assert str(raised.value).startswith(f"{packed}: {reason}") and raised.value.path == packed
    assert not (tmp_path / "evil.json").exists()
    # load: one unreadable row, the archive's (the record files beside it still read)
    df = load(packed)
    assert df[["path", "status"]].values.tolist() == [[str(packed), "unreadable"]]
    assert df["error"][0].startswith(reason[:40])
    done = subprocess.run([sys.executable, "-m", "pipegnn.results.archive", "--unpack", str(packed),
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2 and done.stderr.startswith(f"error: {packed}: {reason[:40]}")
    assert not (tmp_path / "out").exists()


def test_a_file_that_was_no_json_when_packed_is_named_not_written(sweep: Path, tmp_path: Path) -> None:
    (sweep / "records" / "0" / "trace.json").write_bytes(b'{"traceEvents": [\xff')
    packed = _pack(sweep)
    written, unreadable = archive.unpack(packed, tmp_path / "out")
    assert unreadable == {"records/0/trace.json": "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff "
                                                  "in position 17: invalid start byte"}
    assert len(written) == 5 and not (tmp_path / "out" / "records" / "0" / "trace.json").exists()
    assert (load(packed)["status"] != "unreadable").all()  # a trace is no row
    with pytest.raises(ValueError, match="is not a relative path below"):
        archive.pack(tmp_path / ARCHIVE_NAME, {"/etc/passwd": sweep / "records" / "0" / "result.json"})


def test_unpack_checks_names_and_the_destination_before_writing(sweep: Path, tmp_path: Path) -> None:
    """A name longer than the file system takes, or a destination whose links loop: one error naming the
    archive, exit 2, nothing written (not the first file, then ENAMETOOLONG naming only the file)."""
    record = sweep / "records" / "0" / "result.json"
    packed = archive.pack(tmp_path / ARCHIVE_NAME, {"records/a/result.json": record,
                                                    f"records/{'b' * 300}/result.json": record})

    def unpack(dest: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipegnn.results.archive", "--unpack", str(packed),
                               str(dest)], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})

    with pytest.raises(ArchiveError, match="a name of 300 bytes, more than 255"):
        archive.unpack(packed, tmp_path / "out")
    done = unpack(tmp_path / "out")
    assert done.returncode == 2 and done.stderr.startswith(f"error: {packed}: path 'records/bbbb")
    assert "a name of 300 bytes" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "records").symlink_to(loop / "records")
    done = unpack(loop)
    assert done.returncode == 2 and done.stderr.startswith(f"error: {packed}: ")
    assert "Traceback" not in done.stderr
    assert "nothing written" in done.stderr and len(done.stderr.splitlines()) == 1
    (tmp_path / "self").symlink_to(tmp_path / "self")
    done = unpack(tmp_path / "self")
    assert done.returncode == 2 and done.stderr.startswith(f"error: {packed}: cannot write below ")


COMMITTED = sorted(p / ARCHIVE_NAME for p in COMMITTED_RESULTS.values() if (p / ARCHIVE_NAME).is_file())


def test_find_archives_takes_the_names_a_pack_writes(tmp_path: Path) -> None:
    """A sweep's archive and its parts are found by name; no pack writes a part 1 or a part 0."""
    names = ["records.jsonl.gz", "records-2.jsonl.gz", "records-10.jsonl.gz", "records-1.jsonl.gz",
             "records-0.jsonl.gz", "records-02.jsonl.gz", "other.jsonl.gz"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert sorted(p.name for p in archive.find_archives(tmp_path)) == sorted(names[:3])
    # each archive once, by its first part (read whole)
    assert [p.name for p in archive.archives_of(tmp_path)] == ["records.jsonl.gz"]
    (tmp_path / "records.jsonl.gz").unlink()  # later parts without it: each named, to be read as damaged
    assert [p.name for p in archive.archives_of(tmp_path)] == ["records-2.jsonl.gz", "records-10.jsonl.gz"]


def test_no_committed_archive_file_passes_the_bound() -> None:
    """Every committed archive's file, split ones' parts too, is within `MAX_PART_BYTES` (2 MiB), and each
    split archive's parts are all there."""
    files = sorted(f for p in COMMITTED_RESULTS.values() for f in archive.find_archives(p))
    assert len(files) > len(COMMITTED)  # some are split
    assert max(p.stat().st_size for p in files) <= archive.MAX_PART_BYTES == 2 << 20
    assert sorted(p for first in COMMITTED for p in archive.parts(first)) == sorted(files)


def test_the_committed_archives_are_canonical(tmp_path: Path) -> None:
    """Each committed archive holds what packing its unpacked files gives (so it can be re-packed, and
    its files diffed, without a line changing), holds a record per run and a trace beside each, and no preset
    holds both an archive and loose records."""
    assert {p.parent.name for p in COMMITTED} >= {"halo_modes", "poster_offline", "historical_gap"}
    for packed in COMMITTED:
        assert not (packed.parent / "records").exists()
    smallest = min(COMMITTED, key=lambda p: p.stat().st_size)
    written, unreadable = archive.unpack(smallest, tmp_path / smallest.parent.name)
    assert unreadable == {} and all(key.startswith("records/") for key in archive.read(smallest).paths)
    again = archive.pack(tmp_path / ARCHIVE_NAME, archive.run_files(tmp_path / smallest.parent.name,
                                                                    beside=("trace.json",)))
    # the content, not the gzip stream: another zlib build may compress the same lines otherwise
    assert gzip.decompress(again.read_bytes()) == gzip.decompress(smallest.read_bytes())


def test_packing_a_folder_no_archive_can_hold_is_one_error(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Found by probing: a run folder whose name holds a newline (or bytes that are no UTF-8) made --pack
    end in a ValueError traceback; it is one line naming the key, exit 2, and nothing is written."""
    write_record(tmp_path / "sweep" / "run\n1", _record(0))
    assert archive.main(["--pack", str(tmp_path / "sweep")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "holds a character no file name may" in err
    assert "Traceback" not in err
    assert not (tmp_path / "sweep" / ARCHIVE_NAME).exists()
