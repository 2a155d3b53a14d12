"""Result records on disk (pipegnn/results/record_files.py): found, read, checked, each error naming its
file."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest
import torch

from pipegnn import run
from pipegnn.results.record_files import RecordError, find_records, load_record
from pipegnn.runs.record_writes import write_record
from pipegnn.training.checkpoints import save

from tests.helpers import make_cfg

#: The smallest completed record the checks accept: an epoch with its accuracies and the final ones.
COMPLETED = {"status": "completed", "error": None, "config": {"chunks": 2},
             "epochs": [{"epoch": 0, "train_acc": 1, "val_acc": 0.5, "test_acc": 0.25}],
             "final": {"train_acc": 1, "val_acc": 0.5, "test_acc": 0.25, "best_val_acc": 0.5,
                       "test_acc_at_best_val": 0.25}}


def test_find_records_recursive_natural_order_without_temp_files(tmp_path: Path) -> None:
    for job in (10, 2, 0):
        write_record(tmp_path / "s" / str(job), {"status": "completed"})
    (tmp_path / "s" / "2" / ".result.abc.json").write_text("{}")
    (tmp_path / "s" / "notes.json").write_text("{}")
    assert find_records(tmp_path) == [tmp_path / "s" / j / "result.json" for j in ("0", "2", "10")]
    assert find_records(tmp_path / "s" / "2" / "result.json") == [tmp_path / "s" / "2" / "result.json"]
    with pytest.raises(FileNotFoundError):
        find_records(tmp_path / "nope")


def test_load_record_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "0" / "result.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    with pytest.raises(RecordError) as info:
        load_record(bad.parent)
    assert str(info.value).startswith(f"{bad}: JSONDecodeError: Expecting property name")
    assert isinstance(info.value, ValueError) and info.value.path == bad
    bad.write_bytes(b'{"status": "\xff"}')
    with pytest.raises(RecordError, match=f"^{bad}: UnicodeDecodeError"):
        load_record(bad)
    write_record(bad.parent, {**COMPLETED, "epochs": 3})
    with pytest.raises(RecordError,
                       match=f"^{bad}: malformed record: 'epochs' is a number, expected an array$"):
        load_record(bad)
    write_record(bad.parent, {**COMPLETED, "record_version": 3})
    with pytest.raises(RecordError, match=f"^{bad}: record_version 3 is newer than this pipegnn reads "
                                          r"\(up to 2\): update pipegnn"):
        load_record(bad)
    write_record(bad.parent, COMPLETED)  # version 1: the sections it lacks are empty once read
    record = load_record(bad)
    assert record.to_dict() == {"record_version": 2, **COMPLETED, "choices": {}, "env": {}, "timing": {},
                                "memory": {}, "microbatch": {}}
    assert record["status"] == "completed" and record.epochs == COMPLETED["epochs"]
    with pytest.raises(FileNotFoundError):
        load_record(tmp_path / "nope")


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (a full disk after a quarter MiB), where this machine lets the tests mount one
    (root with CAP_SYS_ADMIN, as here); skipped elsewhere."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_is_found_before_training_and_named(tiny_filesystem: Path) -> None:
    """An output folder on a full file system: the probe write (room for a record) fails before any
    epoch, the run is invalid with the file and "No space left on device" named (it used to train to
    the end, then lose the record with a bare OSError)."""
    record = run(make_cfg("train.epochs=2"), output_dir=tiny_filesystem / "run")
    assert record["status"] == "invalid" and record["epochs"] == []
    assert "No space left on device" in record["error"]
    assert str(tiny_filesystem / "run" / "result.json") in record["error"]


def test_a_checkpoint_on_a_full_disk_names_the_file_and_the_cause(tiny_filesystem: Path) -> None:
    """torch.save reports a failed write only as "unexpected pos ..."; the checkpoint's save names the
    file and the cause, and leaves no partial file."""
    path = tiny_filesystem / "checkpoint-rank0.pt"
    with pytest.raises(OSError, match=rf"{path} could not be written: No space left on device"):
        save(path, {"weights": torch.zeros(1 << 17)})  # 512 KiB
    assert list(tiny_filesystem.iterdir()) == []


def test_a_result_json_folder_or_an_unwritable_place_is_invalid_before_training(tmp_path: Path) -> None:
    """result.json being a folder, and an output folder that cannot be created (under a regular file,
    which even root cannot create a folder in): invalid before the first epoch, naming why."""
    (tmp_path / "a" / "result.json").mkdir(parents=True)
    record = run(make_cfg("train.epochs=2"), output_dir=tmp_path / "a")
    assert record["status"] == "invalid" and record["epochs"] == []
    assert "result.json is a folder" in record["error"]
    (tmp_path / "file").write_text("")
    record = run(make_cfg("train.epochs=2"), output_dir=tmp_path / "file" / "run")
    assert record["status"] == "invalid" and "Not a directory" in record["error"]
    assert list((tmp_path / "a").iterdir()) == [tmp_path / "a" / "result.json"]  # the probe left nothing
