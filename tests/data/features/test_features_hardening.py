"""Feature files that cannot hang or litter a run: a FIFO (or a folder) in place of a feature file is
found by stat and rebuilt, and temporary files of a killed write are removed."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pipegnn import run
from pipegnn.data.features import DiskFeatureStore
from pipegnn.data.features.cache import cached_store

from tests.helpers import ROOT, make_cfg


@pytest.fixture
def alarm():
    """Fail (not hang) when a read blocks: SIGALRM after 60 s raises in the blocked call, and the test
    fails on it even when the run caught the error (the yielded list says whether it rang)."""
    rang: list[bool] = []

    def ring(signum, frame):
        rang.append(True)
        raise TimeoutError("blocked for 60 s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(60)
    yield rang
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name, partition", [("node.x.json", False), ("node.x.order.npy", True)])
def test_a_fifo_in_place_of_a_feature_file_does_not_hang_a_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, partition: bool, alarm) -> None:
    """The node-order sidecar (the issue's example) or the partition copy's row order replaced by a FIFO:
    the run warns, rebuilds the file and completes."""
    monkeypatch.setenv("PIPEGNN_CACHE", str(tmp_path))
    cfg = make_cfg("data.features=disk", "engine=single", "chunks=2", "train.epochs=1")
    assert run(cfg)["status"] == "completed"
    target = next(p for p in tmp_path.rglob(name) if p.parent.name.startswith("part-") == partition)
    target.unlink()
    os.mkfifo(target)
    record = run(cfg)
    assert not alarm, "a read blocked on the FIFO"
    assert record["status"] == "completed", record["error"]
    assert target.is_file()


_WRITER = """
import sys, time, torch
from pipegnn.data.features import DiskFeatureStore
def blocks():
    yield torch.zeros(1000, 16)
    print("written", flush=True)
    time.sleep(600)
DiskFeatureStore(sys.argv[1]).write(blocks(), rows=2000, cols=16, dtype=torch.float32)
"""


def _killed_write(folder: Path) -> Path:
    """A writer killed (SIGKILL) half-way through a feature file in ``folder``: its temporary file."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(folder)], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
    finally:
        proc.kill()
        proc.wait()
    (tmp,) = [p for p in folder.iterdir() if p.name.startswith(".node.x.bin.")]
    assert tmp.stat().st_size == 1000 * 16 * 4
    return tmp


def _write(store: DiskFeatureStore) -> None:
    store.write([torch.ones(10, 4)], rows=10, cols=4, dtype=torch.float32, key="k")


def test_a_killed_writes_temporary_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    tmp = _killed_write(tmp_path)
    cached_store(tmp_path, "k", _write)
    assert not tmp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.x.bin", "node.x.json"]


def test_a_killed_partition_copys_temporary_is_removed_on_lookup(tmp_path: Path) -> None:
    """A partition-ordered copy killed mid-write (a folder nothing writes again): the next lookup of the
    dataset's features removes its temporary; a live writer's temporary stays."""
    cached_store(tmp_path, "k", _write)
    tmp = _killed_write(tmp_path / "part-0123456789abcdef")
    tag = f"{socket.gethostname().replace('.', '_')}-{os.getpid()}"
    live = tmp_path / "part-0123456789abcdef" / f".node.x.bin.{tag}.abcd"
    live.write_bytes(b"mine")
    cached_store(tmp_path, "k", _write)
    assert not tmp.exists() and live.exists()


def test_a_folder_named_like_a_dead_writers_temporary_is_left_alone(tmp_path: Path) -> None:
    """A folder (not a file) named as a killed writer's temporary in the feature cache: removing
    temporaries skips it, and a ``data.features=disk`` run completes (it failed on the unlink)."""
    cfg = make_cfg("data.features=disk", f"data.cache={tmp_path}")
    assert run(cfg)["status"] == "completed"
    (folder,) = {p.parent for p in tmp_path.rglob("node.x.bin") if not p.parent.name.startswith("part-")}
    tag = f"{socket.gethostname().replace('.', '_')}-999998"
    for where in (folder, *folder.glob("part-*")):
        (where / f".node.x.bin.{tag}.xyz").mkdir()
    record = run(cfg)
    assert record["status"] == "completed", record["error"]
    assert all((where / f".node.x.bin.{tag}.xyz").is_dir() for where in (folder, *folder.glob("part-*")))
