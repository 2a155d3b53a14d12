"""What ends a spawned pipeline worker by itself: its launcher's exit (a lifeline pipe and the kernel's
parent-death signal) and a deadline that each finished epoch moves; and the worker's end of its result
pipe (see [`pipegnn.training.processes.spawn`][pipegnn.training.processes.spawn])."""
from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger("pipegnn.training.processes.spawn")  # the launcher's logger: one name in the logs

#: How much later than the launcher's deadline a worker stops itself (so a launcher that can act, acts
#: first); the launcher also gives its workers this long to exit after a failure.
GRACE_S = 5.0
#: Exit code of a worker that found its launcher gone.
ORPHANED = 3


class Outbox:
    """A worker's end of its result pipe: JSON messages ``[kind, payload]``, one writer at a time (the
    training thread and the watchdog may both send)."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.lock = threading.Lock()

    def send(self, kind: str, payload: Any, wait_s: float = -1) -> bool:
        """Send one message (waiting at most ``wait_s`` for the pipe, -1: as long as it takes);
        False if it could not be sent (the launcher is gone, or the pipe stayed busy)."""
        data = json.dumps([kind, payload], default=str).encode()
        if not self.lock.acquire(timeout=wait_s):
            return False
        try:
            self.conn.send_bytes(data)
            return True
        except OSError:  # the launcher is gone (broken pipe): the watchdog ends this process
            return False
        finally:
            self.lock.release()


def _set_parent_death_signal(sig: int) -> None:
    """Linux: the kernel sends ``sig`` to this process when its parent exits (``PR_SET_PDEATHSIG``);
    elsewhere nothing (the lifeline still applies)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _log_to_files(level: int, message: str) -> None:
    """Log only to the log files: the console may be a pipe that nobody reads any more (the launcher
    is gone), and a blocked write would keep this process alive."""
    record = log.makeRecord(log.name, level, __file__, 0, message, (), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            try:
                handler.handle(record)
            except Exception:  # noqa: BLE001 - exiting anyway
                pass


class Deadline:
    """A deadline on ``time.monotonic``'s clock (the same for every process of a machine) that each sign
    of progress moves to ``timeout`` later; read and moved from different threads (a float's assignment
    is atomic)."""

    def __init__(self, timeout: float, start: float | None = None):
        self.timeout = timeout
        self.at = (time.monotonic() if start is None else start) + timeout

    def progress(self) -> None:
        """Progress now: the deadline moves to ``timeout`` from now."""
        self.at = time.monotonic() + self.timeout

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())


def guard(rank: int, parent: int | None, lifeline: Connection, deadline: Deadline, timeout: float,
           outbox: Outbox) -> None:
    """End this worker with its launcher, and when it has made no progress by ``deadline``.

    ``parent`` is the launcher's pid where it is this process's parent (``start_method=spawn``), else
    None. The parent death signal only fires for a parent that exits after it is set: a launcher that
    died before (its worker reparented) is caught by checking the parent and the lifeline right after.
    """
    _set_parent_death_signal(signal.SIGKILL)
    if (parent is not None and os.getppid() != parent) or lifeline.poll(0):
        os._exit(ORPHANED)

    def watch() -> None:
        while not lifeline.poll(deadline.left()):  # (a moved deadline: wait on)
            if deadline.left() > 0:
                continue
            message = (f"pipeline worker rank {rank} finished no epoch within engine.timeout_s={timeout:g}s "
                       f"(+{GRACE_S:g}s) of its last one or of the run's start; it stopped itself")
            _log_to_files(logging.ERROR, message)
            outbox.send("result", {"status": "failed", "error": f"TimeoutError: {message}",
                                   "traceback": None}, wait_s=1.0)
            os._exit(1)
        # end of file: the launcher exited
        _log_to_files(logging.ERROR, f"pipeline worker rank {rank}: the launching process exited; stopping")
        os._exit(ORPHANED)

    threading.Thread(target=watch, name="pipegnn-launcher-watch", daemon=True).start()
