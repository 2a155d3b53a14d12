"""Result records on disk (pipegnn/results/records.py): found, read, checked, each error naming its file."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipegnn.results.records import RecordError, find_records, load_record, write_record

#: The smallest record the checks accept.
COMPLETED = {"status": "completed", "error": None, "config": {"chunks": 2}, "epochs": [{"epoch": 0}]}


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
    with pytest.raises(RecordError, match=f"^{bad}: malformed record: 'epochs' is a number, expected an array$"):
        load_record(bad)
    write_record(bad.parent, COMPLETED)
    assert load_record(bad) == COMPLETED
    with pytest.raises(FileNotFoundError):
        load_record(tmp_path / "nope")
