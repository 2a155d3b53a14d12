"""A single run's claim on its folder (``hydra.run.dir``), made before Hydra writes into it: a lock
(``.pipegnn-run.lock``, held while the run lives) and a claim (``.pipegnn-run.json``: pid, host, start, the
run's overrides). A folder whose lock another run holds, or that another run (other overrides, ``resume``
aside) claimed, is never written into: a timestamped ``hydra.run.dir`` (the default, ``${now:...}``) moves
to the first free ``<dir>-2``, ``<dir>-3``, ...; any other is refused with one line naming the first run.
A folder where the lock cannot be made (read-only, say) is refused the same way. Another rank of a
pipeline under torchrun claims nothing and writes none of Hydra's files
([`hydra_writes_nothing`][pipegnn.runs.run_claims.hydra_writes_nothing]): rank 0 claims the folder.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from pipegnn.atomic import atomic_file, process_alive
from pipegnn.errors import FolderTaken
from pipegnn.run_record import RECORD_NAME
from pipegnn.runs.claims import (
    RUN_FILE,
    RUN_LOCK,
    check_folder,
    describe_run,
    job_overrides,
    not_inside_another,
    read_claim,
    task_overrides,
)
from pipegnn.runs.hydra_writes import check_kinds, hydra_paths

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)


def _lock(path: Path, what: str) -> IO[Any] | None:
    """``path`` opened and locked (``flock``, exclusive), or None when another process holds the lock.

    Raises:
        FolderTaken: the lock cannot be made or taken (a read-only folder, a folder at its path), naming
            ``what`` and the cause.
    """
    try:
        lock = open(path, "a+")  # noqa: SIM115 - held by the caller
    except OSError as e:
        raise FolderTaken(f"{what}: its lock {path} cannot be made ({type(e).__name__}: "
                          f"{e.strerror or e}), so the run's record could not be written there either; give "
                          "it a writable folder") from None
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        lock.close()
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise FolderTaken(f"{what}: its lock {path} cannot be taken ({type(e).__name__}: "
                          f"{e.strerror or e})") from None
    return lock


def claim_run(folder: str | Path, overrides: list[str], fresh: bool = False) -> IO[Any]:
    """Claim ``folder`` (``hydra.run.dir``) for a single run with ``overrides`` (see the module doc);
    returns the open lock file, whose lock holds until it is closed (or the process ends). ``fresh``: the
    folder must hold no earlier run's claim at all (a timestamped folder: never a rerun's).

    Raises:
        FolderTaken: another run holds or claimed the folder (naming it), or it cannot take a claim.
    """
    folder = Path(folder)
    key = f"hydra.run.dir={folder}"
    check_folder(folder, "hydra.run.dir")
    made = not (folder / RUN_LOCK).exists()  # a refused run leaves nothing behind, not even its lock
    lock = _lock(folder / RUN_LOCK, key)
    if lock is None:
        running = read_claim(folder / RUN_FILE) or {}
        raise FolderTaken(f"{key} is in use by {describe_run(running)}; give this run a folder of its own")
    try:
        other = read_claim(folder / RUN_FILE)
        if other is not None and _alive_elsewhere(other):  # its lock deleted under it
            raise FolderTaken(f"{key} is in use by {describe_run(other)} (its lock was removed); give this "
                              "run a folder of its own")
        if other is not None and (fresh or job_overrides(list(other.get("overrides") or []))
                                  != job_overrides(overrides)):
            raise FolderTaken(f"{key} holds the record of {describe_run(other)}; give this run a folder of "
                              "its own (or remove that folder)")
        record = folder / RECORD_NAME
        if other is None and (record.exists() or record.is_symlink()):  # a run of before claims: its record's
            written = read_claim(record, 16 << 20) or {}                # overrides say whose it is, if any
            theirs = written.get("overrides")
            same = isinstance(theirs, list) and job_overrides(theirs) == job_overrides(overrides)
            if fresh or not same:
                raise FolderTaken(f"{key} holds the record of another run ({record}, from before runs "
                                  "claimed their folders); give this run a folder of its own (or remove that "
                                  "record)")
        try:
            with atomic_file(folder / RUN_FILE) as f:
                json.dump({"overrides": list(overrides), "pid": os.getpid(), "host": socket.gethostname(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S")}, f, indent=1)
        except OSError as e:
            raise FolderTaken(f"{key} cannot take the run's claim, nor its record: {e}") from None
    except BaseException:
        if made:
            (folder / RUN_LOCK).unlink(missing_ok=True)
        lock.close()
        raise
    return lock


def _alive_elsewhere(claim: dict[str, Any]) -> bool:
    """Whether the run of ``claim`` is another process still running on this host."""
    pid = claim.get("pid")
    if claim.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    return process_alive(pid)


#: The most folders ``<dir>-2``, ``<dir>-3``, ... a timestamped run tries before it is refused.
_SIBLINGS = 100


def claim_run_folder(config: DictConfig) -> IO[Any]:
    """Claim the run's folder (``hydra.run.dir``); a timestamped one that is taken moves to the first free
    ``<dir>-N``, written back into ``config`` (Hydra makes the folder it names after this).

    Raises:
        FolderTaken: the folder is taken (not timestamped), or no ``<dir>-N`` is free.
    """
    folder = Path(os.path.normpath(str(config.hydra.run.dir)))  # R1/x/.. is R1 (and makes no R1/x)
    overrides = task_overrides(config.hydra.overrides.task)
    written = OmegaConf.to_container(config.hydra.run, resolve=False)
    timestamped = isinstance(written, dict) and "${now:" in str(written.get("dir"))
    check_folder(folder, "hydra.run.dir", make=False)
    not_inside_another(folder, "hydra.run.dir")  # before anything is made there, nor beside it
    check_kinds(hydra_paths(folder, config))
    if not timestamped:
        return claim_run(folder, overrides)
    first: FolderTaken | None = None
    for n in range(1, _SIBLINGS + 1):
        here = folder if n == 1 else folder.with_name(f"{folder.name}-{n}")
        try:
            not_inside_another(here, "hydra.run.dir")
            lock = claim_run(here, overrides, fresh=True)
        except FolderTaken as e:
            first = first or e
            continue
        if here != folder:
            log.info("%s is taken (%s); this run writes into %s", folder, first, here)
            with read_write(config.hydra.run), open_dict(config.hydra.run):
                config.hydra.run.dir = str(here)
        return lock
    raise FolderTaken(f"{first}; and {folder}-2 ... {folder}-{_SIBLINGS} are taken too")


def hydra_writes_nothing(config: DictConfig) -> None:
    """Another rank of a pipeline under torchrun writes none of Hydra's files (``.hydra/``, the job's log
    file) into the run's folder: rank 0 claims it and writes them. Were rank 0 refused (a folder another
    run holds), the other ranks' files would have replaced that run's; their log goes to the console."""
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.output_subdir = None
        logging_config = config.hydra.job_logging
        handlers = logging_config.get("handlers") or {}
        files = [name for name in handlers if "filename" in handlers[name]]
        for name in files:
            del handlers[name]
        for holder in (logging_config.get("root"), *(logging_config.get("loggers") or {}).values()):
            if holder is not None and holder.get("handlers") is not None:
                holder.handlers = [h for h in holder.handlers if h not in files]
