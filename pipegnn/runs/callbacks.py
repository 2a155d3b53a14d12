"""Callbacks of ``experiments/train.py``: the end-of-sweep failure summary and the progress bar.

- [`FailureSummary`][pipegnn.runs.callbacks.FailureSummary]: a Hydra callback (registered in
  ``conf/config.yaml``) that, once every job of a sweep has returned, reads the jobs' records from the sweep
  directory, so it works with any launcher (the basic one runs jobs in this process, joblib and SLURM in
  others), names every job that did not complete (number, overrides, status, error) on stderr and in
  ``<sweep dir>/sweep.log``, and sets [`exit_code`][pipegnn.runs.callbacks.exit_code], which
  ``experiments/train.py`` exits with.
- [`EpochProgress`][pipegnn.runs.callbacks.EpochProgress]: a tqdm bar over epochs, fed by the trainer's
  per-epoch log lines.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipegnn.folder_walk import FolderTooDeep
from pipegnn.results.sweep import Job, sweep_jobs
from pipegnn.run_record import RECORD_NAME

if TYPE_CHECKING:
    from tqdm import tqdm

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

_failed: list[Job] = []


#: Why the last sweep's folder could not be read at its end (empty: it could).
_unread: list[str] = []


def exit_code() -> int:
    """1 when the last sweep of this process had a job that did not complete, or its folder could not be
    read at its end, else 0."""
    return 1 if _failed or _unread else 0


class FailureSummary(Callback):
    """After a sweep: name each job that did not complete and make
    [`exit_code`][pipegnn.runs.callbacks.exit_code] non-zero.

    Runs in the process that launched the sweep, after every job returned (with failures captured in
    the records, the jobs return normally and Hydra calls ``on_multirun_end``). It reads the records
    from the sweep directory rather than job return values, so jobs run by joblib or SLURM count too.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _failed.clear()
        _unread.clear()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        marker = sweep_dir / "multirun.yaml"  # written by the sweeper just before the first job
        since = marker.stat().st_mtime if marker.is_file() else None
        try:
            jobs = sweep_jobs(sweep_dir, since)
        except FolderTooDeep as e:  # (a job's folder grew a tree past the walk's depth): no silent exit 0
            _unread[:] = [str(e.strerror)]
            self._report(sweep_dir, [f"sweep {sweep_dir}: its jobs cannot be read: {e.strerror}"],
                         failed=True)
            return
        failed = [j for j in jobs if j.status != "completed"]
        _failed[:] = failed
        kept = sum(1 for j in jobs if j.status == "completed" and not j.fresh)
        counts: dict[str, int] = {}
        for j in jobs:
            counts[j.status] = counts.get(j.status, 0) + 1
        parts = [f"{counts.pop('completed', 0)} completed" + (f" ({kept} skipped by resume)" if kept else "")]
        parts += [f"{n} {s}" for s, n in sorted(counts.items())]
        lines = [f"sweep {sweep_dir}: {len(jobs)} job{'s' * (len(jobs) != 1)}: {', '.join(parts)}"]
        for j in failed:
            lines.append(f"  job {j.num if j.num is not None else '?'} [{j.overrides}] {j.status}: {j.error}")
        if failed:
            lines.append(f"  records in {sweep_dir}/<job>/{RECORD_NAME}; re-run the same command with "
                         f"hydra.sweep.dir={sweep_dir} resume=true to redo only these jobs")
        self._report(sweep_dir, lines, failed=bool(failed))

    @staticmethod
    def _report(sweep_dir: Path, lines: list[str], failed: bool) -> None:
        # Hydra's root logger still writes to the last job's log file at this point: report through
        # a logger of our own, to stderr and <sweep dir>/sweep.log.
        logger = logging.getLogger(f"{__name__}.summary")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        fmt = logging.Formatter(f"[%(asctime)s][{__name__}][%(levelname)s] - %(message)s")
        handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            log_file = sweep_dir / "sweep.log"
            if log_file.is_symlink() or (log_file.exists() and not log_file.is_file()):  # a FIFO hung here
                lines = [*lines, f"  (not written to {log_file}: it is not a regular file)"]
            else:
                handlers.append(logging.FileHandler(log_file))
        except OSError:
            pass
        for h in handlers:
            h.setFormatter(fmt)
            logger.addHandler(h)
        try:
            logger.log(logging.ERROR if failed else logging.INFO, "\n".join(lines))
        finally:
            for h in handlers:
                logger.removeHandler(h)
                h.close()


class EpochProgress:
    """A tqdm bar over a run's epochs: pass it as ``pipegnn.run(..., on_epoch=progress)``, which calls
    it with each finished epoch (for ``pipelining`` too: rank 0's epochs reach the launching process).

    Use as a context manager; it does nothing unless ``enabled`` (``experiments/train.py`` enables it
    when stderr is a terminal). While active, the trainer's per-epoch log lines (marked with
    `pipegnn.training.epochs.EPOCH_LINE`) are kept off the console handlers that write to a
    terminal (the bar shows loss and validation accuracy instead); they still go to the job's log file.
    """

    def __init__(self, total: int, enabled: bool, desc: str | None = None) -> None:
        self.total, self.enabled, self.desc = total, enabled, desc
        self.bar: tqdm | None = None
        self._muted: list[logging.Handler] = []

    @staticmethod
    def _mute(record: logging.LogRecord) -> bool:
        # pipegnn.training.epochs.EPOCH_LINE (not imported: torch)
        return not getattr(record, "pipegnn_epoch", False)

    def __enter__(self) -> "EpochProgress":
        if not self.enabled:
            return self
        for h in logging.getLogger().handlers:
            stream = getattr(h, "stream", None)
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler) \
                    and getattr(stream, "isatty", lambda: False)():
                h.addFilter(self._mute)
                self._muted.append(h)
        return self

    def __call__(self, epoch: Mapping[str, Any]) -> None:
        """Advance the bar to the finished ``epoch`` (an entry of the record's ``epochs``)."""
        if not self.enabled:
            return
        try:
            bar = self.bar
            if bar is None:  # drawn from the first epoch on, below the setup lines
                from tqdm import tqdm

                bar = self.bar = tqdm(total=self.total, desc=self.desc or "epochs", unit="epoch",
                                      file=sys.stderr, dynamic_ncols=True, leave=True)
            bar.set_postfix(loss=f"{epoch['train_loss']:.4f}", val=f"{epoch['val_acc']:.3f}", refresh=False)
            bar.update(int(epoch["epoch"]) + 1 - bar.n)
            if bar.n >= self.total:  # finish the line before the run's closing log line
                bar.close()
        except Exception:  # noqa: BLE001 - a progress bar must never break a run
            pass

    def __exit__(self, *exc: Any) -> None:
        if not self.enabled:
            return
        for h in self._muted:
            h.removeFilter(self._mute)
        self._muted.clear()
        if self.bar is not None:
            self.bar.close()
            self.bar = None
