"""The one reader of the project's JSON files (result records, traces, feature sidecars): whatever is
wrong with a file's content, invalid UTF-8, invalid JSON, nesting too deep for the parser
(``RecursionError``, which ``JSONDecodeError`` handlers do not catch), is one
[`JSONFileError`][pipegnn.jsonfile.JSONFileError] naming the file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["JSONFileError", "parse_json", "read_json"]


class JSONFileError(ValueError):
    """A JSON file whose content cannot be read. ``str()`` names the file; ``path`` and ``reason`` hold
    the two parts."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason


def read_json(path: str | Path) -> Any:
    """The JSON value in ``path``.

    Raises:
        JSONFileError: the content is not valid UTF-8 JSON, or is nested too deeply to parse.
        OSError: the file cannot be read (FileNotFoundError: there is none; IsADirectoryError).
    """
    return parse_json(Path(path).read_bytes(), path)


def parse_json(data: bytes, path: str | Path) -> Any:
    """The JSON value of ``data``, read from ``path``.

    Raises:
        JSONFileError: ``data`` is not valid UTF-8 JSON, or is nested too deeply to parse.
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise JSONFileError(path, "RecursionError: nested too deeply to parse") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise JSONFileError(path, f"{type(e).__name__}: {e}") from None
