"""Runs that survive preemption: SIGTERM/SIGINT end a run with a record, checkpoints let it continue."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from pipegnn import run
from pipegnn.results import load as load_table
from pipegnn.training.checkpoints import checkpoint_path, load, previous_path, save
from pipegnn.training.preemption import Interrupted

from tests.helpers import ROOT, TINY_SYNTHETIC, CodeMarker, damage_a_tensor, make_cfg


def _interrupt_at(epoch: int, signum: int = signal.SIGTERM):
    """An ``on_epoch`` callback that sends this process ``signum`` once epoch ``epoch`` is finished (a
    scheduler's preemption at a known point)."""
    def on_epoch(entry: dict) -> None:
        if entry["epoch"] == epoch:
            os.kill(os.getpid(), signum)
    return on_epoch


def _losses(record: dict) -> list[float]:
    assert record["status"] == "completed", (record["error"], record.get("traceback"))
    return [e["train_loss"] for e in record["epochs"]]


@pytest.mark.parametrize("overrides", [
    ("model=gcn", "engine=single", "chunks=4", "model.dropout=0"),
    ("model=gat", "engine=gpipe", "chunks=4", "microbatch.halo=historical", "model.dropout=0"),
    ("model=gcn2", "model.layers=4", "engine=single", "chunks=2", "microbatch.halo=historical",
     "model.dropout=0.5"),
])
def test_resumed_run_equals_an_uninterrupted_one(tmp_path: Path, overrides: tuple) -> None:
    """SIGTERM after epoch 4 of 7 with a checkpoint every 2 epochs: the record says interrupted (5
    epochs, the signal), and resume=true continues after epoch 3 (parameters, Adam, history caches, RNG
    restored): every epoch's loss and accuracy equal the uninterrupted run's bit for bit (the same
    operations in the same order; with dropout too, since the RNG states come back)."""
    cfg = [*overrides, "train.epochs=7", "train.checkpoint_every=2"]
    whole = run(make_cfg(*cfg), output_dir=tmp_path / "whole")
    with pytest.raises(Interrupted) as stop:
        run(make_cfg(*cfg), output_dir=tmp_path, on_epoch=_interrupt_at(4))
    record = json.loads((tmp_path / "result.json").read_text())
    assert stop.value.record["status"] == record["status"] == "interrupted"
    assert record["interrupted"] == {"signal": "SIGTERM", "epochs_finished": 5}
    assert record["error"] == "interrupted by SIGTERM" and len(record["epochs"]) == 5
    assert load(checkpoint_path(tmp_path))["epochs"][-1]["epoch"] == 3
    resumed = run(make_cfg(*cfg, "resume=true"), output_dir=tmp_path)
    assert resumed["resumed"]["epochs_restored"] == 4
    assert [e["epoch"] for e in resumed["epochs"]] == list(range(7))
    assert _losses(resumed) == _losses(whole)
    for key in ("train_acc", "val_acc", "test_acc"):
        assert [e[key] for e in resumed["epochs"]] == [e[key] for e in whole["epochs"]]
    assert resumed["final"]["best_epoch"] == whole["final"]["best_epoch"]


def test_pipelining_resumes_on_every_rank(tmp_path: Path) -> None:
    """engine=pipelining (2 spawned workers): a SIGTERM to the launcher stops the workers, the record
    keeps rank 0's finished epochs, each rank left its own checkpoint, and the resumed run's losses equal
    an uninterrupted run's."""
    cfg = ["engine=pipelining", "chunks=2", "model.dropout=0", "train.epochs=6", "train.checkpoint_every=2"]
    whole = run(make_cfg(*cfg), output_dir=tmp_path / "whole")
    with pytest.raises(Interrupted):
        run(make_cfg(*cfg), output_dir=tmp_path, on_epoch=_interrupt_at(2))
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "interrupted" and record["interrupted"]["signal"] == "SIGTERM"
    assert [e["epoch"] for e in record["epochs"]][:3] == [0, 1, 2]
    assert all(checkpoint_path(tmp_path, r).is_file() for r in (0, 1))
    resumed = run(make_cfg(*cfg, "resume=true"), output_dir=tmp_path)
    assert resumed["resumed"]["epochs_restored"] >= 2
    assert _losses(resumed) == pytest.approx(_losses(whole), rel=1e-5)


def test_a_checkpoint_of_another_config_is_not_resumed(tmp_path: Path) -> None:
    common = ["model.dropout=0", "train.checkpoint_every=1", "train.epochs=2"]
    run(make_cfg(*common, "train.lr=0.01"), output_dir=tmp_path)
    resumed = run(make_cfg(*common, "train.lr=0.02", "resume=true"), output_dir=tmp_path)
    assert resumed["status"] == "completed" and "resumed" not in resumed
    assert load(checkpoint_path(tmp_path))["epochs"][-1]["train_loss"] == resumed["epochs"][-1]["train_loss"]


@pytest.mark.parametrize("damage", ["code", "truncated"])
def test_a_damaged_checkpoint_is_never_run_and_costs_only_the_resume(
        tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint is read with weights_only=True: one that would build an object (or a truncated one)
    is not resumed from, with a warning; the object's code never runs, and the run trains from epoch 0."""
    marker = tmp_path / "code-ran"
    path = checkpoint_path(tmp_path)
    if damage == "code":
        torch.save({"config": CodeMarker(marker)}, path)
    else:
        run(make_cfg("train.checkpoint_every=1", "train.epochs=2"), output_dir=tmp_path)
        path.write_bytes(path.read_bytes()[:100])
        previous_path(path).unlink()  # (else the run resumes from the one before)
    record = run(make_cfg("train.checkpoint_every=1", "train.epochs=2", "resume=true"), output_dir=tmp_path)
    assert record["status"] == "completed" and "resumed" not in record, record["error"]
    assert [e["epoch"] for e in record["epochs"]] == [0, 1]
    assert f"resume: the checkpoint {path} cannot be resumed from (it cannot be read" in caplog.text
    assert not marker.exists()
    assert Path(f"{path}.unusable").is_file()


@pytest.mark.parametrize("size", ["sparse", "room"])
def test_a_checkpoint_larger_than_memory_allows_is_set_aside_unread(
        tmp_path: Path, size: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint is an outside file (a writable run folder): one larger than this process can still
    allocate (a sparse file past the memory there is; a whole checkpoint, with 1 KB of room) is set aside
    before torch reads it, naming its size, and the run trains from epoch 0."""
    from pipegnn.measure import allocatable_bytes
    from pipegnn.training import checkpoints

    cfg = ["model.dropout=0", "train.checkpoint_every=1", "train.epochs=2"]
    path = checkpoint_path(tmp_path)
    if size == "sparse":
        with open(path, "wb") as f:
            f.truncate(allocatable_bytes() + (1 << 30))
    else:
        run(make_cfg(*cfg), output_dir=tmp_path)
        previous_path(path).unlink()  # (else the run resumes from the one before)
        monkeypatch.setattr(checkpoints, "allocatable_bytes", lambda: 1000)
    held = path.stat().st_size
    record = run(make_cfg(*cfg, "resume=true"), output_dir=tmp_path)
    assert record["status"] == "completed" and "resumed" not in record, record["error"]
    assert [e["epoch"] for e in record["epochs"]] == [0, 1]
    assert (f"cannot be resumed from (it cannot be read: ValueError: {path} holds {held:,} bytes, more than "
            "this process can still allocate (") in caplog.text
    assert Path(f"{path}.unusable").stat().st_size == held


@pytest.mark.parametrize("content", ["list", "no optimizer", "flipped bytes", "more epochs"])
def test_a_checkpoint_with_the_wrong_content_is_set_aside(tmp_path: Path, content: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint that loads but cannot be resumed from (not a training state, a key missing, bytes of
    a parameter overwritten in place, more finished epochs than train.epochs) is set aside with a
    warning naming why, and the run trains from epoch 0 as a fresh run would: on every retry."""
    cfg = ["model.dropout=0", "train.checkpoint_every=1", "train.epochs=2"]
    fresh = run(make_cfg(*cfg), output_dir=tmp_path / "fresh")
    path = checkpoint_path(tmp_path)
    if content == "list":
        torch.save([1, 2, 3], path)
    else:
        epochs = "train.epochs=3" if content == "more epochs" else "train.epochs=2"
        run(make_cfg(*cfg, epochs), output_dir=tmp_path)
        if content == "no optimizer":
            torch.save({k: v for k, v in load(path).items() if k != "optimizer"}, path)
        elif content == "flipped bytes":
            damage_a_tensor(path)
        previous_path(path).unlink()  # (else the run resumes from the one before)
    record = run(make_cfg(*cfg, "resume=true"), output_dir=tmp_path)
    assert record["status"] == "completed" and "resumed" not in record, record["error"]
    assert _losses(record) == _losses(fresh)
    assert f"resume: the checkpoint {path} cannot be resumed from" in caplog.text
    assert Path(f"{path}.unusable").is_file()
    why = {"list": "not a stored state", "no optimizer": "content checksum",
           "flipped bytes": "content checksum",
           "more epochs": "3 finished epochs, more than train.epochs=2"}[content]
    assert why in caplog.text


def test_a_longer_run_trains_on_from_a_shorter_ones_checkpoint(tmp_path: Path) -> None:
    """resume=true with a larger train.epochs continues after the checkpoint's last epoch (the epoch
    budget is not part of what a checkpoint must match), and equals a run as long from the start."""
    cfg = ["model.dropout=0", "train.checkpoint_every=1"]
    whole = run(make_cfg(*cfg, "train.epochs=4"), output_dir=tmp_path / "whole")
    run(make_cfg(*cfg, "train.epochs=2"), output_dir=tmp_path)
    longer = run(make_cfg(*cfg, "train.epochs=4", "resume=true"), output_dir=tmp_path)
    assert longer["resumed"]["epochs_restored"] == 2
    assert [e["epoch"] for e in longer["epochs"]] == [0, 1, 2, 3]
    assert _losses(longer) == _losses(whole)


def test_save_is_atomic(tmp_path: Path) -> None:
    """A save that fails half-way leaves the previous checkpoint and no temporary file."""
    path = checkpoint_path(tmp_path)
    save(path, {"epochs": [1]})

    class Unsaveable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle")

    with pytest.raises(RuntimeError):
        save(path, {"epochs": [Unsaveable()]})
    assert load(path)["epochs"] == [1] and [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_bad_checkpoint_every_is_invalid(value: object) -> None:
    """Refused before training, naming the key (a config given as a plain dict has no schema to catch
    1.5 or true at composition)."""
    cfg = OmegaConf.to_container(make_cfg(), resolve=True)
    cfg["train"]["checkpoint_every"] = value
    record = run(cfg)
    message = ("train.checkpoint_every must be" if isinstance(value, int) and not isinstance(value, bool) else
               f"train.checkpoint_every: Value '{value}' of type '{type(value).__name__}' "
               "could not be converted")
    assert record["status"] == "invalid" and message in record["error"], record["error"]
    assert record["epochs"] == []


def test_checkpoints_need_an_output_directory() -> None:
    record = run(make_cfg("train.checkpoint_every=2"))
    assert record["status"] == "invalid" and "no output directory" in record["error"], record["error"]


def _wait_for_epoch(log: Path, epoch: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while f"epoch {epoch:3d} " not in (log.read_text() if log.is_file() else ""):
        assert proc.poll() is None and time.monotonic() < end, (log.read_text() if log.is_file() else "")
        time.sleep(0.1)


@pytest.mark.parametrize("engine, signum", [  # pipelining: make test-all
    ("single", signal.SIGTERM), pytest.param("pipelining", signal.SIGINT, marks=pytest.mark.slow)])
def test_a_signal_to_a_sweep_leaves_an_interrupted_record(tmp_path: Path, engine: str, signum: int) -> None:
    """The CLI, as a scheduler preempts it: SIGTERM (or Ctrl-C's SIGINT) to a sweep's process while its
    first job trains. The job's record says interrupted with its finished epochs, the command exits with
    128 + the signal, the sweep stops (as Hydra's does), and the results table lists the job."""
    sweep = tmp_path / "sweep"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "experiments" / "train.py"), "-m", *TINY_SYNTHETIC,
                             f"engine={engine}", "chunks=2", "train.epochs=100000", "train.seed=0,1",
                             f"hydra.sweep.dir={sweep}"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        _wait_for_epoch(sweep / "0" / "train.log", 2, proc)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err[-3000:]
    record = json.loads((sweep / "0" / "result.json").read_text())
    assert record["status"] == "interrupted", record.get("error")
    assert record["interrupted"]["signal"] == signal.Signals(signum).name
    assert record["interrupted"]["epochs_finished"] == len(record["epochs"]) >= 3
    assert not (sweep / "1").exists()
    table = load_table(sweep)
    assert list(table.sort_values("seed")["status"]) == ["interrupted", "missing"]


def _epochs_without_val_loss(state: dict) -> None:
    for epoch in state["epochs"]:
        del epoch["val_loss"]


def _moment_of_another_shape(state: dict) -> None:
    state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(7)


def _renumbered(state: dict) -> None:
    state["epochs"][0]["epoch"] = 5


#: Content a checksum holds over (resealed after the edit) that no run writes: the issue's three examples,
#: then two more: epochs numbered otherwise, an epoch that is no object.
_RESEALED = {
    "optimizer state 'x'": (lambda s: s.update(optimizer="x"), "its state does not fit this model"),
    "epochs missing keys": (_epochs_without_val_loss, "its epochs are not a run's: no 'epochs[0].val_loss'"),
    "NaN in epochs": (lambda s: s["epochs"][1].update(train_loss=float("nan")),
                      "its epochs are not a run's: 'epochs[1].train_loss' is nan, expected a finite number"),
    "epochs renumbered": (_renumbered, "its epochs are not numbered 0, 1, ... in order"),
    "an epoch that is text": (lambda s: s["epochs"].__setitem__(0, "x"),
                              "'epochs[0]' is a string, expected an object"),
    # found by probing: a trace that is no JSON, a configuration nested past the parser or of another shape
    "a trace that is no JSON": (lambda s: s.update(trace="{not json"), "its trace is no JSON text"),
    "a configuration nested too deeply": (lambda s: s.update(config="[" * 200_000 + "]" * 200_000),
                                          "its configuration is no JSON object"),
    "a configuration that is a list": (lambda s: s.update(config="[1, 2]"),
                                       "its configuration is no JSON object"),
    # and again: Adam's moment of another shape (the first step failed, on every resume)
    "an optimizer moment of another shape": (_moment_of_another_shape,
                                             "the optimizer's exp_avg has shape (7,)"),
    # a fourth time: an epoch's wall clock that is text (a traceback after training, no record, every
    # resume), parameters of NaN (a failed run on every resume)
    "an ended_at that is text": (lambda s: s["epochs"][0].update(ended_at="x"),
                                 "an epoch's ended_at is no time (a finite number)"),
    "NaN parameters": (lambda s: next(t for t in s["model"].values() if t.is_floating_point()).fill_(
        float("nan")), "its parameters hold NaN or inf"),
}


@pytest.mark.parametrize("content", list(_RESEALED))
def test_a_sealed_checkpoint_of_content_no_run_writes_is_set_aside_once(
        tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture) -> None:
    """Its checksum holds, its content is no run's: every resume failed (AttributeError, KeyError) or a
    completed record held NaN. It is set aside naming why, the run trains from epoch 0 as a fresh one,
    and the next resume finds nothing to set aside."""
    from pipegnn.integrity import seal

    cfg = ["model.dropout=0", "train.checkpoint_every=1", "train.epochs=3"]
    fresh = run(make_cfg(*cfg), output_dir=tmp_path / "fresh")
    path = checkpoint_path(tmp_path)
    run(make_cfg(*cfg[:-1], "train.epochs=2"), output_dir=tmp_path)
    state = load(path)
    edit, why = _RESEALED[content]
    edit(state)
    torch.save(seal(state), path)
    previous_path(path).unlink()  # (else the run resumes from the one before)
    record = run(make_cfg(*cfg, "resume=true"), output_dir=tmp_path)
    assert record["status"] == "completed" and "resumed" not in record, record["error"]
    assert _losses(record) == _losses(fresh)
    assert why in caplog.text and Path(f"{path}.unusable").is_file()
    caplog.clear()
    again = run(make_cfg(*cfg, "resume=true"), output_dir=tmp_path)
    assert again["status"] == "completed" and "set aside" not in caplog.text


def _shared_lists() -> list:
    lists: list = []
    for _ in range(40):
        lists = [lists, lists]  # 2**40 items walked as a tree, in some hundred bytes
    return lists


def _nested_lists() -> list:
    lists: list = []
    for _ in range(3000):
        lists = [lists]
    return lists


@pytest.mark.parametrize("content, why", [
    ("shared lists", "it holds more than 10,000,000 items, more than any run's checkpoint"),
    ("a stride-0 view", "views more bytes than its storage holds"),
    ("nested lists", "it is nested more than 64 deep"),
])
def test_a_checkpoint_no_walk_could_finish_is_set_aside(tmp_path: Path, content: str, why: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Found by probing: a 1.9 KB checkpoint of lists shared 64 times over held every resume for ever
    (its checksum walked 2**64 items; here 40 times, within the nesting bound), a 1.8 KB stride-0 view of
    2**40 elements was `oom` on every resume (the checksum made it whole), lists nested 3,000 deep a
    RecursionError on every resume. Each is set aside before its checksum is walked, naming why, and the
    run trains from epoch 0."""
    import sys

    cfg = ["model.dropout=0", "train.checkpoint_every=1", "train.epochs=2"]
    path = checkpoint_path(tmp_path)
    bulk = {"shared lists": _shared_lists, "nested lists": _nested_lists,
            "a stride-0 view": lambda: torch.zeros(1, dtype=torch.float64).expand(2 ** 40)}[content]()
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # (pickling 3,000 levels)
    try:
        torch.save({"checksum": "crc32:00000000", "config": "{}", "model": {"w": bulk}, "optimizer": None,
                    "rng": {}, "history": {}, "epochs": []}, path)
    finally:
        sys.setrecursionlimit(limit)
    assert path.stat().st_size < 1 << 20
    record = run(make_cfg(*cfg, "resume=true"), output_dir=tmp_path)
    assert record["status"] == "completed" and "resumed" not in record, record["error"]
    assert [e["epoch"] for e in record["epochs"]] == [0, 1]
    assert why in caplog.text and Path(f"{path}.unusable").is_file()
