"""Train one configuration (or a sweep with -m); each job writes result.json into its output dir.

A job never raises for a failing run: ``pipegnn.run`` records the failure (status invalid, failed or
oom, with the error and traceback) and the job returns, so a sweep goes on. At the end of a sweep the
``FailureSummary`` callback (conf/config.yaml) names the jobs that did not complete and the command
exits with 1; a single run (no -m) that did not complete logs one line (its status, the error and where
its record is; the traceback, which the record holds too, only with ``hydra.verbose=true``) and exits
with 1 too. SIGTERM or
SIGINT ends the running job with its record (status interrupted), then the command, with 128 + the
signal's number (143, 130); with ``resume=true`` a job that left a checkpoint (``train.checkpoint_every``)
continues from it.

A sweep's folder belongs to one sweep (``pipegnn.runs.ownership``: the ``SweepOwner`` callback of
conf/config.yaml): a second sweep started into a folder where one runs, or
whose plan is another sweep's, is refused before it writes anything (exit 1); a job whose folder another
job of the sweep claimed (``hydra.sweep.subdir`` the same for several jobs) writes nothing there and is
named at the end (exit 1).
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

try:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import DictConfig, OmegaConf

    from pipegnn.config import schema
    from pipegnn.errors import FolderTaken
    from pipegnn.runs.callbacks import EpochProgress, exit_code
    from pipegnn.runs.claims import task_overrides
    from pipegnn.runs.ownership import claim_job
    from pipegnn.runs.resume_check import completed_record
    from pipegnn.training.preemption import Interrupted
except ImportError as missing:  # e.g. a bare `python` outside the venv: say which interpreter has them
    venv = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
    sys.exit(f"{Path(__file__).name}: {missing} (interpreter {sys.executable}): run it with the venv's "
             f"Python, {venv}, which `make setup` creates (or `make run ARGS=...`)")

# The typed schemas behind the YAML groups must be in the ConfigStore before Hydra composes.
schema.register()

log = logging.getLogger("pipegnn.job")
_single_failed: list[str] = []  # the message of a single run (no -m) that did not complete
_refused: list[str] = []  # jobs of a sweep whose folder another job claimed
_OVERLAP = "pipeline stages cannot overlap"


class _OverlapOncePerSweep(logging.Filter):
    """In a sweep, the note that a pipeline's stages cannot overlap (GPipe's stages on one CPU, the
    poster's setting in the presets that run it) is logged once, at INFO, not as every job's warning."""

    said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not (record.levelno == logging.WARNING and str(record.msg).startswith(_OVERLAP)):
            return True
        if _OverlapOncePerSweep.said:
            return False
        _OverlapOncePerSweep.said = True
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg = f"{record.msg} (said once per sweep; each job's record has it: pipeline.overlap_note)"
        return True


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    from pipegnn import run  # torch and the frameworks: only once a job runs (not for --help, --cfg)

    hc = HydraConfig.get()
    out = hc.runtime.output_dir
    multirun = hc.mode == RunMode.MULTIRUN
    job = f"job {hc.job.num} " if multirun else ""
    if multirun:
        try:
            claim_job(out, hc.job.num, task_overrides(hc.overrides.task), sweep=hc.sweep.dir)
        except FolderTaken as e:  # an invalid record beside it says so (and fails the sweep)
            return _refuse(out, hc, cfg, str(e))
    train_log = logging.getLogger("pipegnn.train")
    if multirun and not any(isinstance(f, _OverlapOncePerSweep) for f in train_log.filters):
        train_log.addFilter(_OverlapOncePerSweep())
    if cfg.resume:
        record, reason = completed_record(out, cfg)
        if record is not None:
            log.info("%sskipped: completed (record in %s)", job, out)
            return record
        log.info("%sresume: running (%s)", job, reason)
    # A progress bar over epochs on an interactive terminal, for jobs run in this process.
    bar = sys.stderr.isatty() and "BasicLauncher" in str(hc.launcher.get("_target_", ""))
    with EpochProgress(int(cfg.train.epochs), enabled=bar,
                               desc=f"job {hc.job.num}" if multirun else "epochs") as progress:
        record = run(cfg, output_dir=out, choices=hc.runtime.choices, on_epoch=progress,
                     overrides=task_overrides(hc.overrides.task))
    if record["status"] != "completed":
        # The run logged its error already (pipegnn.training.launch); this line gives the status and where
        # the record went, and a single run's exit message (the error) is kept for its caller.
        message = f"{record['status']}: {record['error']} (record in {out})"
        if record.get("traceback"):
            log.debug("traceback of the run:\n%s", record["traceback"])  # shown with hydra.verbose=true
        if not multirun:
            _single_failed.append(message)
            log.error("run %s (the error above; record in %s)", record["status"], out)
            return record
        # In a sweep the job returns; the FailureSummary callback reports it and sets the exit code.
        log.error("%s[%s] %s (the error above; record in %s)", job,
                  " ".join(task_overrides(hc.overrides.task)), record["status"], out)
    return record


def _refuse(out: str, hc: Any, cfg: DictConfig, error: str) -> dict:
    """The record of a job whose folder another job claimed: ``invalid``, written beside that folder
    (``<folder>.job<num>.refused``), or where that folder lies outside this sweep's folder (another
    sweep's, say), in this sweep's (``<hydra.sweep.dir>/job<num>.refused``): never into another sweep's."""
    from pipegnn.run_record import RunRecord, Status
    from pipegnn.runs.record_writes import write_record

    log.error("job %s: %s", hc.job.num, error)
    _refused.append(error)
    record = RunRecord(status=Status.INVALID, error=error, config=OmegaConf.to_container(cfg, resolve=True),
                       choices=dict(hc.runtime.choices), env={}, overrides=task_overrides(hc.overrides.task))
    # beside the folder when it lies in this sweep's folder; else (another sweep's, or anywhere) in this one's
    sweep = Path(hc.sweep.dir).resolve()
    inside = sweep == Path(out).resolve() or sweep in Path(out).resolve().parents
    where = f"{out.rstrip('/')}.job{hc.job.num}.refused" if inside else sweep / f"job{hc.job.num}.refused"
    path = write_record(where, record)
    log.error("job %s: record in %s", hc.job.num, path)
    return record.to_dict()


def _no_hydra_log_file(argv: list[str]) -> None:
    """Hydra configures its own logging (``hydra.hydra_logging``) before any callback can see it: a file
    handler given there is opened first, wherever it points (another run's folder; a FIFO hung the
    start). Refused here, in one line, before Hydra starts (the SweepOwner callback refuses one a config
    sets, once Hydra has opened it)."""
    for arg in argv:
        if "hydra_logging" in arg and "filename" in arg:
            sys.exit(f"run refused: {arg}: Hydra's own log may go to the console only (a file there may be "
                     "another run's); log into the run's folder through hydra.job_logging")


if __name__ == "__main__":
    _no_hydra_log_file(sys.argv[1:])
    try:
        main()
    except Interrupted as e:  # the run recorded it (status interrupted); a sweep stops here, as Hydra's does
        log.warning("%s: record written; exiting with %d", e, e.exit_code)
        sys.exit(e.exit_code)
    if _refused:
        log.error("%d job(s) wrote no record: their folder is another job's:\n  %s", len(_refused),
                  "\n  ".join(_refused))
    sys.exit(1 if _single_failed or _refused else exit_code())
