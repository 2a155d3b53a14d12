"""Result records: one ``result.json`` per run, written atomically."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["RECORD_NAME", "STATUSES", "load_record", "write_record"]

RECORD_NAME = "result.json"
STATUSES = ("completed", "failed", "invalid", "oom")


def write_record(directory: str | Path, record: dict[str, Any]) -> Path:
    """Write ``record`` as ``directory/result.json`` atomically (a reader never sees half a file)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".result.", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2, default=str)
            f.write("\n")
        path = directory / RECORD_NAME
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_record(path: str | Path) -> dict[str, Any]:
    """Read one record (a ``result.json`` file or the directory holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORD_NAME
    return json.loads(path.read_text())
