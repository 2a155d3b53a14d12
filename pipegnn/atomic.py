"""Files written atomically: a reader, or a process killed while writing, never sees half a file; and the
temporary files of killed writes, removed.

Every write goes through a temporary file beside its target, ``.<file name>.<host>-<pid>.<random>``
([`atomic_path`][pipegnn.atomic.atomic_path], [`atomic_file`][pipegnn.atomic.atomic_file]), which replaces the
target when the write completes. A process killed while writing leaves its temporary file behind: the next
write of the same file removes those of writers on this host whose process is gone
([`clean_stale_temporaries`][pipegnn.atomic.clean_stale_temporaries]); those of live writers and of other
hosts (a shared folder) are left alone.

Shared by training (checkpoints, records), the caches (plans, graphs, feature and graph stores) and the
results package, so that none imports another for it.
"""
from __future__ import annotations

import glob
import os
import re
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: A temporary file's name: its target's name, the writer's host (dots as underscores) and pid, a random part.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<host>[^.]+)-(?P<pid>\d+)\.[^.]+")


def _host() -> str:
    return socket.gethostname().replace(".", "_")  # one field of the name


def _umask() -> int:
    """This process's umask, read where Linux says it (``os.umask`` alone sets it too, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def clean_stale_temporaries(folder: Path, name: str | None = None) -> list[Path]:
    """Remove the temporary files in ``folder`` (of the file ``name`` only, when given) that writers on
    this host left when they were killed (their process is gone); returns them. Those of live writers, of
    other hosts, anything that is not a regular file, and anything else are left alone."""
    removed: list[Path] = []
    pattern = f".{glob.escape(name)}.*-*.*" if name is not None else ".*.*-*.*"
    try:
        candidates = list(Path(folder).glob(pattern)) if Path(folder).is_dir() else []
    except OSError:
        return removed
    for path in candidates:
        m = _TEMPORARY.fullmatch(path.name)
        if m is None or (name is not None and m["name"] != name) or m["host"] != _host() \
                or process_alive(int(m["pid"])):
            continue
        if path.is_symlink() or not path.is_file():  # a writer's temporary is a regular file
            continue
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


@contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """A temporary file beside ``path`` (yielded as a str, created empty) that replaces ``path`` when the
    block ends without an error, and is removed otherwise. The stale temporaries of ``path`` (killed
    writers on this host) are removed first.

    Raises:
        OSError: the folder cannot take the temporary file, or the replace fails.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{_host()}-{os.getpid()}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would replace the file as others cannot read it
    finally:
        os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextmanager
def atomic_file(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file opened for writing that replaces ``path`` only when the block completes
    ([`atomic_path`][pipegnn.atomic.atomic_path]): a reader, or a process killed while writing, never sees
    half a file; on any error the temporary file is removed and ``path`` is left as it was.

    Raises:
        OSError: naming ``path`` and the cause (``No space left on device``), whatever failed: the
            folder, the writes, the final flush or the replace.
    """
    path = Path(path)
    try:
        with atomic_path(path) as tmp, open(tmp, mode) as f:
            yield f
    except OSError as e:
        raise OSError(e.errno, f"{path} could not be written: {e.strerror or e}") from e
