"""engine.launcher=spawn (pipegnn.training.processes.spawn): the launcher hands rank 0's epochs on, a
worker's failure, invalid configuration or lack of progress becomes the run's record, a run that keeps
finishing epochs outlives engine.timeout_s, workers end with a killed launcher and with a stopped one when
they stop progressing, a killed rank is named, the forkserver's start is outside a run's time, and fresh
interpreters (start_method=spawn) train as the forkserver's workers do.

Processes are expensive here (each imports torch and PyG), so the runs are few and tiny; workers fork
from a forkserver that is started once per test session (engine.start_method's default).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import psutil
import pytest

from pipegnn import run

from tests.helpers import ROOT, losses_no_dropout, make_cfg


def test_launcher_hands_rank_zero_epochs_to_on_epoch() -> None:
    seen: list[dict] = []
    record = run(make_cfg("engine=pipelining"), on_epoch=seen.append)
    assert record["status"] == "completed", record["error"]
    assert seen == record["epochs"] and [e["epoch"] for e in seen] == [0, 1, 2]


def test_failing_worker_fails_the_run(tmp_path: Path) -> None:
    """A worker's exception (here: a learning rate so large that the loss of the second epoch is not
    finite) becomes a failed record with the worker's message and traceback, promptly, and keeps the
    epoch that was trained."""
    record = run(make_cfg("engine=pipelining", "train.lr=1e30"), output_dir=tmp_path)
    assert record["status"] == "failed"
    assert record["error"].startswith("WorkerFailed: pipeline worker rank")
    assert "FloatingPointError: training loss is nan at epoch 1" in record["error"]
    assert "in fit" in record["traceback"]  # the worker's traceback, not the parent's
    assert [e["epoch"] for e in record["epochs"]] == [0]
    assert record["timing"]["total_s"] < 60
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"


def test_worker_invalid_config_is_invalid() -> None:
    """chunks above the number of targets is found in the workers (it needs the graph): invalid."""
    record = run(make_cfg("engine=pipelining", "chunks=31"))
    assert record["status"] == "invalid"
    assert "chunks=31 is larger than the number of training targets (30)" in record["error"]


#: The launcher's log line with the workers' pids, in rank order.
_PIDS = re.compile(r"started 2 pipeline workers \(.*\): pids \[(\d+), (\d+)\]")


def _wait_for(log: Path, pattern: str | re.Pattern, timeout: float = 60.0,
              running: Callable[[], bool] = lambda: True) -> re.Match:
    """The first match of ``pattern`` in the log file, polled until ``timeout`` (or until ``running``
    says the run is over)."""
    end = time.monotonic() + timeout
    while True:
        text = log.read_text() if log.is_file() else ""
        match = re.search(pattern, text)
        if match is not None:
            return match
        if time.monotonic() > end or not running():
            raise AssertionError(f"{pattern!r} not in the log within {timeout:g}s:\n{text[-3000:]}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _still_alive(pids: list[int], timeout: float) -> list[int]:
    """The processes of ``pids`` still running after waiting up to ``timeout`` for them to end."""
    end = time.monotonic() + timeout
    while [p for p in pids if _alive(p)] and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start_run(tmp_path: Path, *overrides: str) -> tuple[subprocess.Popen, Path]:
    """A pipelining run of many epochs in a process of its own (``python -c``), logging into the
    returned file (its workers too), with its temporary files under ``tmp_path / "tmp"``."""
    log, tmp = tmp_path / "run.log", tmp_path / "tmp"
    tmp.mkdir()
    code = ("import logging, sys; sys.path.insert(0, sys.argv[1]); from tests.helpers import make_cfg; "
            "from pipegnn import run; logging.basicConfig(filename=sys.argv[2], level=logging.INFO); "
            "run(make_cfg('engine=pipelining', 'train.epochs=1000000', *sys.argv[3:]))")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with open(tmp_path / "console.log", "w") as console:
        proc = subprocess.Popen([sys.executable, "-c", code, str(ROOT), str(log), *overrides],
                                env=env, cwd=tmp_path, stdout=console, stderr=subprocess.STDOUT)
    return proc, log


def test_killing_the_launcher_ends_its_workers(tmp_path: Path) -> None:
    """kill -9 of a run's process during training: its workers (and the forkserver they came from) end
    within seconds, and no temporary folder of the run is left behind."""
    proc, log = _start_run(tmp_path)
    descendants: list[int] = []
    try:
        _wait_for(log, r"\[rank 0\] epoch +1 ", running=lambda: proc.poll() is None)
        descendants = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(descendants) >= 2  # the workers (and the forkserver and resource tracker)
        proc.kill()
        proc.wait()
        left = _still_alive(descendants, timeout=10.0)
        assert not left, f"still running after their launcher was killed: {left}"
    finally:
        proc.kill()
        _kill(descendants)
    # The first worker to end saw its lifeline close (the other may end first from the lost peer).
    assert re.search(r"pipeline worker rank \d: the launching process exited; stopping", log.read_text())
    assert not list((tmp_path / "tmp").glob("pipegnn-pipeline-*"))


@contextlib.contextmanager
def _running(log: Path, *overrides: str) -> Iterator[tuple[dict, list[int], threading.Thread]]:
    """``run(make_cfg("engine=pipelining", *overrides))`` in a thread, logging into ``log`` (the workers
    too: they log at the launcher's level, into its log files); yields where its record will be
    (``["record"]``), its workers' pids once they started and its thread, then waits for the run to end
    (its workers are killed if it does not)."""
    handler = logging.FileHandler(log)
    logging.getLogger().addHandler(handler)
    out: dict = {}
    cfg = make_cfg("engine=pipelining", *overrides)
    thread = threading.Thread(target=lambda: out.update(record=run(cfg)))
    pids: list[int] = []
    try:
        thread.start()
        pids.extend(int(p) for p in _wait_for(log, _PIDS, running=thread.is_alive).groups())
        yield out, pids, thread
        thread.join(60)
        assert not thread.is_alive(), "the run did not end"
    finally:
        if thread.is_alive():
            _kill(pids)
            thread.join(30)
        logging.getLogger().removeHandler(handler)
        handler.close()


def test_stuck_workers_time_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Workers that make no progress (both stopped, SIGSTOP, right after they start): the launcher
    terminates them at engine.timeout_s and the run fails saying so."""
    caplog.set_level(logging.INFO)
    with _running(tmp_path / "run.log", "train.epochs=1000000", "engine.timeout_s=4") as (out, pids, _):
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
    record = out["record"]
    assert record["status"] == "failed"
    assert "finished no epoch within engine.timeout_s=4s" in record["error"], record["error"]
    assert time.monotonic() - stopped < 4 + 5 + 10  # the timeout, the terminate's grace before the kill
    assert not _still_alive(pids, timeout=10.0)


@pytest.mark.slow  # a minute of timeouts waited out (make test-all runs it)
def test_workers_outlive_the_timeout_while_they_progress_and_stop_themselves_without(tmp_path: Path) -> None:
    """engine.timeout_s bounds the time without progress, not the run: a run training past it (and past
    the workers' own deadline, 5 s later) goes on. A launcher that cannot end its workers then (stopped,
    SIGSTOP): the workers stop themselves when they have finished no epoch for that long, with a clear
    error in the log."""
    # (the first window holds a fresh forkserver's start, 3.5-4.2 s on an idle machine, and the set-up)
    proc, log = _start_run(tmp_path, "engine.timeout_s=15")
    pids: list[int] = []
    try:
        pids = [int(p) for p in _wait_for(log, _PIDS, running=lambda: proc.poll() is None).groups()]
        time.sleep(15 + 5 + 2)
        assert proc.poll() is None and not [p for p in pids if not _alive(p)], log.read_text()[-3000:]
        os.kill(proc.pid, signal.SIGSTOP)
        left = _still_alive(pids, timeout=15 + 5 + 15)
        assert not left, f"still running past the deadline: {left}"
    finally:
        proc.kill()
        proc.wait()
        _kill(pids)
    text = log.read_text()
    assert re.search(r"pipeline worker rank \d finished no epoch within engine.timeout_s=15s \(\+5s\) of its "
                     r"last one or of the run's start; it stopped itself", text)
    epochs = [int(e) for e in re.findall(r"\[rank 0\] epoch +(\d+) ", text)]
    assert max(epochs) > 100, max(epochs)  # (tiny epochs, milliseconds each: it trained on past 22 s)


def test_killed_rank_is_named_and_the_trained_epochs_are_kept(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """kill -9 of rank 1 during training: the run fails naming rank 1 and the signal (not rank 0, which
    only lost its peer), and the record keeps the epochs rank 0 had finished."""
    caplog.set_level(logging.INFO)  # the workers log at the launcher's level, into its log files
    log = tmp_path / "run.log"
    # (if the kill never comes, the run goes on until _running gives up waiting and kills the workers)
    with _running(log, "train.epochs=1000000") as (out, pids, thread):
        _wait_for(log, r"\[rank 0\] epoch +2 ", running=thread.is_alive)
        os.kill(pids[1], signal.SIGKILL)
    record = out["record"]
    assert record["status"] == "failed"
    assert "pipeline worker rank 1 was killed by SIGKILL (exit code -9)" in record["error"], record["error"]
    epochs = [e["epoch"] for e in record["epochs"]]
    assert len(epochs) >= 3 and epochs == list(range(len(epochs)))
    assert all(0 <= e["train_acc"] <= 1 and "pipeline" in e for e in record["epochs"])
    assert not _still_alive(pids, timeout=10.0)


@pytest.mark.slow  # make test-all (14 s: two sweeps of pipelined jobs)
def test_the_forkserver_starts_outside_the_run_time(tmp_path: Path) -> None:
    """The forkserver's one-time start (its imports: here a preloaded module that takes 5 s) happens
    before the run's clock starts, so that the first pipelined job of a sweep does not pay it in its set-up
    and time to accuracy when the next ones do not (a fresh interpreter: a fresh forkserver)."""
    (tmp_path / "slow_preload.py").write_text("import time\ntime.sleep(5)\n")
    code = ("import json, sys; sys.path[:0] = sys.argv[1:3]; from tests.helpers import make_cfg; "
            "from pipegnn import run; from pipegnn.training.processes import spawn; "
            "preload = spawn.forkserver_preload; "
            "spawn.forkserver_preload = lambda module: [*preload(module), 'slow_preload']; "
            "record = run(make_cfg('engine=pipelining')); "
            "print(json.dumps({'status': record['status'], 'timing': record['timing']}))")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    timing = record["timing"]
    assert record["status"] == "completed" and timing["forkserver_ready_s"] >= 5
    # The launcher's own time beyond its workers' (their start and end): 0.1-0.4 s on two cores; with the
    # forkserver's start in it, 5 s and its imports more.
    assert timing["launch_s"] - timing["workers_total_s"] < 4


@pytest.mark.slow
def test_spawn_start_method() -> None:
    """Fresh interpreters (engine.start_method=spawn) instead of the forkserver."""
    assert losses_no_dropout("engine=pipelining", "engine.start_method=spawn") == \
        pytest.approx(losses_no_dropout("engine=single"), rel=1e-4)
