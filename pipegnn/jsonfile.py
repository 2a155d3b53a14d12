"""Reading outside files within bounds, and the one reader of the project's JSON files (result records,
traces, feature sidecars).

A file is read only when it is a regular file ([`open_regular`][pipegnn.jsonfile.open_regular]: a FIFO
never makes a reader wait, a device is never read), and never past a limit
([`read_regular`][pipegnn.jsonfile.read_regular]). Whatever is wrong with a JSON file's content, invalid
UTF-8, invalid JSON, nesting too deep for the parser (``RecursionError``, which ``JSONDecodeError``
handlers do not catch), is one [`JSONFileError`][pipegnn.jsonfile.JSONFileError] naming the file."""
from __future__ import annotations

import errno
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: The largest JSON file [`read_json`][pipegnn.jsonfile.read_json] reads (a traced epoch's timeline of a
#: deep pipeline is a few MB).
MAX_JSON_BYTES = 64 << 20


class JSONFileError(ValueError):
    """A JSON file whose content cannot be read. ``str()`` names the file; ``path`` and ``reason`` hold
    the two parts."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason


def read_json(path: str | Path, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in the regular file ``path`` of at most ``limit`` bytes.

    Raises:
        JSONFileError: the content is not valid UTF-8 JSON, is nested too deeply to parse, or is larger
            than ``limit``.
        OSError: the file cannot be read (FileNotFoundError: there is none; NotRegularFileError: a folder,
            a FIFO, a device).
    """
    try:
        data = read_regular(path, limit)
    except ValueError as e:
        raise JSONFileError(path, str(e)) from None
    return parse_json(data, path)


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


class NotRegularFileError(OSError):
    """A file a reader was asked to read that is not a regular file (a folder, a FIFO, a device, a
    socket), refused before a byte is read; ``str()`` names it and what it is."""


#: Flags every reader opens a file with: never wait (a FIFO opened for reading without them waits for a
#: writer forever), never become a controlling terminal, never leak into a child.
_READ_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0))


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` that is not a regular file is, in words (``a FIFO``)."""
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return "not a regular file"


@contextmanager
def open_regular(path: str | Path) -> Iterator[BinaryIO]:
    """``path`` opened for reading in binary, if it is a regular file (a link to one included). Anything
    else is refused before it is opened (``os.stat``), and again once it is (``fstat`` of the descriptor,
    opened with ``O_NONBLOCK``): a FIFO never makes a reader wait, a device is never read.

    Raises:
        NotRegularFileError: (an OSError) ``path`` is a folder, a FIFO, a device or a socket (``str()``
            says which).
        OSError: it cannot be opened (FileNotFoundError: there is none, or it is a link to nothing).
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(errno.EINVAL, f"{path} is {file_kind(mode)}, not a regular file")
    fd = os.open(path, _READ_FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced since the stat
            raise NotRegularFileError(errno.EINVAL, f"{path} is {file_kind(mode)}, not a regular file")
        file = os.fdopen(fd, "rb")  # O_NONBLOCK changes nothing for a regular file
    except BaseException:
        os.close(fd)
        raise
    with file:
        yield file


def read_regular(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (see [`open_regular`][pipegnn.jsonfile.open_regular]), at
    most ``limit`` of them.

    Raises:
        NotRegularFileError, OSError: see [`open_regular`][pipegnn.jsonfile.open_regular].
        ValueError: the file holds more than ``limit`` bytes (naming it and the limit).
    """
    with open_regular(path) as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise ValueError(f"{path} holds more than {limit:,} bytes, more than any such file should")
    return data


def write_json(path: str | Path, value: Any, most: int | None = None) -> Path:
    """Write the JSON ``value`` as ``path``, as every record and trace is written (indented by 2, a final
    newline; values JSON cannot hold as their ``str``), atomically: a reader never sees half a file.
    ``most``: where the indented text would pass ``most`` bytes, it is written without spaces instead
    (indenting a value nested 64 deep multiplies its size by 65).

    Raises:
        OSError: naming the file and the cause.
    """
    from pipegnn.atomic import atomic_file

    with atomic_file(path) as f:
        size = 0
        for chunk in json.JSONEncoder(indent=2, default=str).iterencode(value):
            size += len(chunk)
            if most is not None and size > most:
                f.seek(0)
                f.truncate()
                json.dump(value, f, separators=(",", ":"), default=str)
                break
            f.write(chunk)
        f.write("\n")
    return Path(path)
