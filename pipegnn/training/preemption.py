"""Runs that survive preemption: a signal ends a run with a record.

While a run trains ([`interruptible`][pipegnn.training.preemption.interruptible]), SIGTERM (a scheduler's
preemption or time limit) and SIGINT (Ctrl-C) raise [`Interrupted`][pipegnn.training.preemption.Interrupted]
in the main thread, so the run unwinds, records ``status: interrupted`` with the epochs finished so far and
the signal, and then ends (exit code 128 + signal, as a process killed by it reports). Later signals while
the run unwinds, and any while it writes its record, wait for the record.

A checkpoint lets such a run continue: its files are [`checkpoints`][pipegnn.training.checkpoints], the
configuration it must have been made with [`resume_config`][pipegnn.training.resume_config], and the
resume point every rank agrees on [`resume`][pipegnn.training.resume].
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from pipegnn.run_record import RunRecord

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: The signals that end a run with a record.
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """The run was stopped by a signal (``signum``). A BaseException, as KeyboardInterrupt is, so that
    no ``except Exception`` on the way records it as a failure; [`pipegnn.run`][pipegnn.training.launch.run]
    records it and raises it again with the record attached (``record``)."""

    def __init__(self, signum: int, record: RunRecord | None = None):
        self.signum = int(signum)
        self.name = signal.Signals(self.signum).name
        self.record = record
        super().__init__(f"interrupted by {self.name}")

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process killed by the signal: 128 + its number."""
        return 128 + self.signum


class Guard:
    """The signal handling of one [`interruptible`][pipegnn.training.preemption.interruptible] block:
    ``signum`` of the first signal (None if none came) and whether it raises now or is held
    ([`hold`][pipegnn.training.preemption.Guard.hold])."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.held = False
        self.deferring = False

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            return  # the run is already unwinding: let it write its record
        self.signum = signum
        if not self.held and not self.deferring:
            raise Interrupted(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A signal inside the block is raised ([`Interrupted`][pipegnn.training.preemption.Interrupted]) once
        the block has finished, not in the middle of it (a checkpoint being saved: the record and the
        checkpoint then hold the same epochs)."""
        if self.held or self.deferring:
            yield
            return
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.signum is not None:
            raise Interrupted(self.signum)

    def hold(self) -> None:
        """From now on a signal is only noted in ``signum`` (the caller is writing the record, and raises
        [`Interrupted`][pipegnn.training.preemption.Interrupted] for it afterwards)."""
        self.held = True


@contextmanager
def interruptible() -> Iterator[Guard]:
    """Inside the block the first SIGTERM or SIGINT raises
    [`Interrupted`][pipegnn.training.preemption.Interrupted] (later ones are ignored, so that the record gets
    written); after [`Guard.hold`][pipegnn.training.preemption.Guard.hold] it is only noted in the guard. Off
    the main thread, where Python cannot install signal handlers, nothing changes."""
    global _active
    guard = Guard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {s: signal.signal(s, guard.handler) for s in SIGNALS}
    outer, _active = _active, guard
    try:
        yield guard
    finally:
        _active = outer
        for s, h in previous.items():
            signal.signal(s, h)


#: The guard of the innermost [`interruptible`][pipegnn.training.preemption.interruptible] block of the main
#: thread (None: none).
_active: Guard | None = None


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Inside an [`interruptible`][pipegnn.training.preemption.interruptible] block of the main thread,
    [`Guard.deferred`][pipegnn.training.preemption.Guard.deferred]; elsewhere nothing changes."""
    guard = _active if threading.current_thread() is threading.main_thread() else None
    if guard is None:
        yield
        return
    with guard.deferred():
        yield
