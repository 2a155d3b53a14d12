"""What the loaders of downloadable datasets share: finding their raw files in the read-only data root
or the cache, bounding a download's waits, and the one
[`DatasetUnavailable`][pipegnn.errors.DatasetUnavailable] message that names the missing files, the URL and
the folder to put them in."""
from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import Iterator

from pipegnn.errors import DatasetUnavailable

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Seconds a download may wait on one connect or read before it counts as failed (offline machines
#: whose firewall drops packets would otherwise hang for minutes).
DOWNLOAD_TIMEOUT_S = 30.0


def first_complete(folders: list[Path], files: list[str]) -> Path | None:
    """The first folder that holds all ``files``, or None."""
    return next((d for d in folders if all((d / f).is_file() for f in files)), None)


def unreadable(name: str, folder: Path, url: str, error: BaseException) -> DatasetUnavailable:
    return DatasetUnavailable(
        f"dataset {name!r}: its files in {folder} could not be read ({type(error).__name__}: {error}). "
        f"Replace them with the ones in {url}.")


def unavailable(name: str, missing: list[str], looked: list[Path], url: str, error: BaseException,
                how: str) -> DatasetUnavailable:
    where = ", ".join(str(p) for p in looked)
    what = f"files {missing} are missing (looked in {where})" if missing else \
        f"its files in {looked[-1]} could not be read"
    return DatasetUnavailable(
        f"dataset {name!r}: {what} and the download from {url} failed ({type(error).__name__}: "
        f"{error}). Download {url}, {how}; or set $PIPEGNN_DATA / data.root to the folder holding it.")


@contextlib.contextmanager
def download_timeout(seconds: float = DOWNLOAD_TIMEOUT_S) -> Iterator[None]:
    """Bound every socket wait of a download (urllib uses the global default timeout)."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds if previous is None else previous)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)
