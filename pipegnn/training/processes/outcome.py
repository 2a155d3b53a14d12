"""What a spawned pipeline's run records of its workers: which rank's failure its error names, and
what it takes from rank 0's record (the record type's rule:
[`pipegnn.run_record.RunRecord.combine`][pipegnn.run_record.RunRecord.combine]).

When a worker fails the others usually fail at once with a lost connection to the dead peer, so the
cause named is, in this order: a rank that found the configuration invalid or ran out of memory; a rank
stopped by a signal that it recorded (the run is then interrupted); a rank that died without reporting
(killed by a signal, crashed), in the order the launcher saw the exits; a rank that reported a failure
other than a lost connection; the first rank that reported a failure.
"""
from __future__ import annotations

import dataclasses
import signal
from typing import Any, Mapping, Sequence

from pipegnn.errors import ConfigError
from pipegnn.run_record import RunRecord
from pipegnn.training.preemption import Interrupted

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: A reported error with one of these only says that the rank lost its peer (which failed first).
LOST_PEER = ("connection reset by peer", "connection closed by peer", "broken pipe", "connection refused",
             "socket closed")


class WorkerFailed(RuntimeError):
    """A pipeline worker failed; ``worker_traceback`` is the worker's traceback (for the record)."""

    def __init__(self, message: str, worker_traceback: str | None = None):
        super().__init__(message)
        self.worker_traceback = worker_traceback


def death(rank: int, code: int) -> str:
    """How a rank that reported nothing ended (its exit code)."""
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
        return f"pipeline worker rank {rank} {how} (exit code {code})"
    return f"pipeline worker rank {rank} exited with exit code {code} without reporting a result"


def failure(exits: list[tuple[int, int]], results: dict[int, dict[str, Any]]) -> BaseException | None:
    """The parent's exception for the workers' exits (None: every rank completed): a worker's invalid
    configuration or out-of-memory error as such, else ``WorkerFailed`` naming the rank that failed
    first (see the module doc)."""
    failed = [(r, code) for r, code in exits
              if code != 0 or (results.get(r) or {}).get("status") != "completed"]
    if not failed:
        return None
    reported = [(r, results[r]) for r, _ in failed if r in results]
    for _, res in reported:
        if res.get("status") == "invalid":
            return ConfigError(res["error"])
    for r, res in reported:
        if res.get("status") == "oom":
            return MemoryError(f"pipeline worker rank {r}: {res['error']}")
    for _, res in reported:  # a worker stopped by a signal (a scheduler's): the run is interrupted
        if res.get("status") == "interrupted":
            return Interrupted(signal.Signals[res["interrupted"]["signal"]])
    for r, code in failed:
        if r not in results:
            return WorkerFailed(death(r, code))
    r, res = next(((r, res) for r, res in reported
                   if not any(m in str(res.get("error")).lower() for m in LOST_PEER)), reported[0])
    return WorkerFailed(f"pipeline worker rank {r} failed: {res.get('error')}", res.get("traceback"))


def merge(record: RunRecord, worker: Mapping[str, Any] | None,
          epochs: Sequence[dict[str, Any]], completed: bool) -> None:
    """Rank 0's record (``worker``, as it came through its pipe; None: rank 0 reported nothing) into
    the launcher's ``record``, in place, by [`RunRecord.combine`][pipegnn.run_record.RunRecord.combine]:
    the fields rank 0 fills (its memory only when the run ``completed``: after a failure the launcher
    records its own), and the ``epochs`` rank 0 streamed while it ran if it could not report them all."""
    combined = RunRecord.combine(record, worker, epochs, completed)
    for f in dataclasses.fields(RunRecord):
        if f.init:
            setattr(record, f.name, getattr(combined, f.name))
