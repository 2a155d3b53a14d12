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
"""
from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from pipegnn import results, schema
from pipegnn.training.preemption import Interrupted

# The typed schemas behind the YAML groups must be in the ConfigStore before Hydra composes.
schema.register()

log = logging.getLogger("pipegnn.job")
_single_failed: list[str] = []  # the message of a single run (no -m) that did not complete


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    from pipegnn import run  # torch and the frameworks: only once a job runs (not for --help, --cfg)

    hc = HydraConfig.get()
    out = hc.runtime.output_dir
    multirun = hc.mode == RunMode.MULTIRUN
    job = f"job {hc.job.num} " if multirun else ""
    if cfg.resume:
        record, reason = results.completed_record(out, cfg)
        if record is not None:
            log.info("%sskipped: completed (record in %s)", job, out)
            return record
        log.info("%sresume: running (%s)", job, reason)
    # A progress bar over epochs on an interactive terminal, for jobs run in this process.
    bar = sys.stderr.isatty() and "BasicLauncher" in str(hc.launcher.get("_target_", ""))
    with results.EpochProgress(int(cfg.train.epochs), enabled=bar,
                               desc=f"job {hc.job.num}" if multirun else "epochs") as progress:
        record = run(cfg, output_dir=out, choices=hc.runtime.choices, on_epoch=progress)
    if record["status"] != "completed":
        message = f"{record['status']}: {record['error']} (record in {out})"
        if record.get("traceback"):
            log.debug("traceback of the run:\n%s", record["traceback"])  # shown with hydra.verbose=true
        if not multirun:
            _single_failed.append(message)
            log.error("run %s", message)
            return record
        # In a sweep the job returns; the FailureSummary callback reports it and sets the exit code.
        log.error("%s[%s] %s", job, " ".join(hc.overrides.task), message)
    return record


if __name__ == "__main__":
    try:
        main()
    except Interrupted as e:  # the run recorded it (status interrupted); a sweep stops here, as Hydra's does
        log.warning("%s: record written; exiting with %d", e, e.exit_code)
        sys.exit(e.exit_code)
    sys.exit(1 if _single_failed else results.exit_code())
