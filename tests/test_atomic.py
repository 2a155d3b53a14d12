"""Atomic writes leave no litter: the temporary file of a write killed half-way (a checkpoint, a record, a
plan) is removed by the next write of the same file; a live writer's and another host's stay."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch

from pipegnn.atomic import atomic_path, clean_stale_temporaries

from tests.helpers import ROOT

_KILLED = ("import sys, time; from pipegnn.atomic import atomic_path\n"
           "with atomic_path(sys.argv[1]) as tmp:\n"
           "    open(tmp, 'wb').write(b'half'); print('written', flush=True); time.sleep(600)\n")


def _killed_write(target: Path) -> Path:
    """A writer of ``target`` killed (SIGKILL) half-way: its temporary file."""
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(target)], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
    finally:
        proc.kill()
        proc.wait()
    (tmp,) = [p for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.")]
    return tmp


def _checkpoint(path: Path) -> None:
    from pipegnn.training.checkpoints import save

    save(path, {"epochs": [1]})


def _record(path: Path) -> None:
    from pipegnn.runs.record_writes import write_record

    write_record(path.parent, {"status": "completed"}, path.name)


def _plan(path: Path) -> None:
    from pipegnn.microbatch.cache import _save

    _save({"x": torch.zeros(2)}, path)


@pytest.mark.parametrize("name, write", [(".checkpoint-rank0.pt", _checkpoint), ("result.json", _record),
                                         ("plan-0123.pt", _plan)])
def test_the_next_write_removes_a_killed_writes_temporary(tmp_path: Path, name: str,
                                                           write: Callable[[Path], None]) -> None:
    target = tmp_path / name
    stale = _killed_write(target)
    write(target)
    assert not stale.exists() and target.is_file()
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_live_writers_and_another_hosts_temporaries_stay(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    other_host = tmp_path / ".result.json.elsewhere-1.abc"
    other_host.write_text("another host's")
    with atomic_path(target) as mine:
        assert clean_stale_temporaries(tmp_path) == [] and Path(mine).exists()
    assert other_host.exists() and not Path(mine).exists()
    assert os.path.basename(mine).startswith(".result.json.")


@pytest.mark.parametrize("umask", [0o022, 0o077])
@pytest.mark.parametrize("name, write", [("checkpoint-rank0.pt", _checkpoint), ("result.json", _record),
                                         ("plan-0123.pt", _plan)])
def test_a_file_written_atomically_has_the_mode_any_write_gives(
        tmp_path: Path, name: str, write: Callable[[Path], None], umask: int) -> None:
    """A temporary file is made 0600 (mkstemp), and replacing the target with it kept that: records and
    checkpoints others could not read. It has the mode an ordinary write gives (0666 less the umask)."""
    old = os.umask(umask)
    try:
        write(tmp_path / name)
        (tmp_path / "plain").write_text("")
    finally:
        os.umask(old)
    assert (tmp_path / name).stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777 \
        == 0o666 & ~umask
