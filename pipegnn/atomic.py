"""Files written atomically: a reader, or a process killed while writing, never sees half a file.

Shared by training (checkpoints, records) and the results package, so that neither imports the other
for it.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

__all__ = ["atomic_file"]


@contextmanager
def atomic_file(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file opened for writing that replaces ``path`` only when the block completes (a temporary file
    beside it, then ``os.replace``): a reader, or a process killed while writing, never sees half a
    file; on any error the temporary file is removed and ``path`` is left as it was.

    Raises:
        OSError: naming ``path`` and the cause (``No space left on device``), whatever failed: the
            folder, the writes, the final flush or the replace.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
    except OSError as e:
        raise OSError(e.errno, f"{path} could not be written: {e.strerror or e}") from e
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
