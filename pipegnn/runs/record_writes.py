"""A run's record written: ``result.json`` (and any JSON file beside it: a trace) written atomically, and
the check, before a run trains, that it can be.

What a record holds: [`pipegnn.run_record.RunRecord`][pipegnn.run_record.RunRecord]; reading records back is
[`pipegnn.results.record_files`][pipegnn.results.record_files]'s.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Mapping

from pipegnn.jsonfile import write_json
from pipegnn.run_record import RECORD_NAME, RunRecord

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Room a record needs, which [`probe_record_folder`][pipegnn.runs.record_writes.probe_record_folder] checks
#: (a long run's record, every epoch's entry, is some hundreds of KiB).
RECORD_ROOM = 1 << 20


def probe_record_folder(directory: str | Path, name: str = RECORD_NAME) -> None:
    """Check, before a run trains, that ``directory/<name>`` can be written: not a folder, and room for
    `RECORD_ROOM` bytes in a writable folder (a probe file, written, synced and removed).

    Raises:
        OSError: naming the file and the cause (IsADirectoryError, PermissionError, No space left...).
    """
    path = Path(directory) / name
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR,
                                f"{path} is a folder, so the run's record cannot be written there")
    probe = Path(directory) / f".{name}.probe-{os.getpid()}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(bytes(RECORD_ROOM))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise OSError(e.errno, f"{path} could not be written: {e.strerror or e}") from e
    finally:
        probe.unlink(missing_ok=True)


def record_place_taken(directory: str | Path, folders: Mapping[str, str | Path],
                       name: str = RECORD_NAME) -> str | None:
    """Which of ``folders`` (a setting's key -> the folder the run will make for it) lies at the place of
    the record ``directory/<name>`` or around it: its key (None: none does). Checked before a run trains: a
    tracker's folder named ``result.json`` made the finished run's record unwritable."""
    record = Path(os.path.realpath(Path(directory) / name))  # (Path.resolve raises on a link loop)
    for key, folder in folders.items():
        place = Path(os.path.realpath(folder))
        if place == record or record in place.parents:
            return key
    return None


def write_record(directory: str | Path, record: RunRecord | dict[str, Any],
                 name: str = RECORD_NAME) -> Path:
    """Write ``record`` (a [`RunRecord`][pipegnn.run_record.RunRecord] as
    [`to_dict`][pipegnn.run_record.RunRecord.to_dict] gives it, or any JSON value: a trace) as
    ``directory/<name>`` (``result.json``) atomically (a reader never sees half a file).

    Raises:
        OSError: naming the file and the cause.
    """
    if isinstance(record, RunRecord):  # else default=str would write its repr
        record = record.to_dict()
    return write_json(Path(directory) / name, record)
