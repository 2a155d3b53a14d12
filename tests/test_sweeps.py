"""Sweeps that never lose a result: failure capture, exit codes, resume, launchers, presets, schemas."""
from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from pipegnn import run
from pipegnn.config import check_config
from pipegnn.errors import ConfigError
from pipegnn.results import load, write_record
from pipegnn.schema import compose_config
from pipegnn.sweep import EpochProgress, FailureSummary, completed_record, exit_code, planned_jobs, sweep_jobs

from conftest import CONF, ROOT, TINY_SYNTHETIC, make_cfg

# Four jobs of one sweep, one per variant (a config group added from a test folder): two that complete,
# one invalid (31 chunks, the tiny graph has 30 training targets) and one that diverges mid-training
# (lr 1e30: the loss is NaN at epoch 1, so the trainer raises FloatingPointError).
VARIANTS = {
    "exact": "chunks: 2\nmicrobatch:\n  halo: exact\n",
    "naive": "chunks: 2\nmicrobatch:\n  halo: none\n",
    "too_many_chunks": "chunks: 31\n",
    "diverging": "chunks: 2\ntrain:\n  lr: 1.0e30\n",
}
EXPECTED = {"exact": "completed", "naive": "completed", "too_many_chunks": "invalid", "diverging": "failed"}
INVALID_MESSAGE = "chunks=31 is larger than the number of training targets (30)"
NAN_MESSAGE = "FloatingPointError: training loss is nan at epoch 1"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIPEGNN_CACHE": str(cwd / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def variants(tmp_path: Path) -> Path:
    folder = tmp_path / "extra_conf" / "variant"
    folder.mkdir(parents=True)
    for name, body in VARIANTS.items():
        (folder / f"{name}.yaml").write_text(f"# @package _global_\n{body}")
    return folder.parent


def _sweep(tmp_path: Path, variants: Path, sweep: Path, *extra: str) -> subprocess.CompletedProcess:
    return _cli(tmp_path, "-m", *TINY_SYNTHETIC, "train.epochs=2", "devices=cpu2",
                f"+variant={','.join(VARIANTS)}", f"hydra.searchpath=[file://{variants}]",
                f"hydra.sweep.dir={sweep}", *extra)


def _records(sweep: Path) -> dict[str, dict]:
    """Records by variant name (the job's choice of the variant group)."""
    out = {}
    for path in sweep.glob("*/result.json"):
        record = json.loads(path.read_text())
        out[record["choices"]["variant"]] = record
    return out


def _check_failures_named(text: str, sweep: Path) -> None:
    summary = text[text.index(f"sweep {sweep}: 4 jobs"):]
    assert "4 jobs: 2 completed" in summary and "1 failed" in summary and "1 invalid" in summary
    assert "job 2 [" in summary and "+variant=too_many_chunks" in summary
    assert f"] invalid: {INVALID_MESSAGE}" in summary
    assert "job 3 [" in summary and "+variant=diverging" in summary
    assert f"] failed: {NAN_MESSAGE}" in summary
    assert "+variant=exact] " not in summary and "+variant=naive] " not in summary


def test_failing_jobs_are_recorded_the_sweep_goes_on_and_resume_redoes_only_them(
        tmp_path: Path, variants: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = _sweep(tmp_path, variants, sweep)
    assert proc.returncode == 1, proc.stderr[-3000:]
    records = _records(sweep)
    assert {v: r["status"] for v, r in records.items()} == EXPECTED
    assert INVALID_MESSAGE in records["too_many_chunks"]["error"]
    assert records["too_many_chunks"]["epochs"] == []
    assert records["diverging"]["error"] == NAN_MESSAGE
    assert "raise FloatingPointError" in records["diverging"]["traceback"]
    assert len(records["diverging"]["epochs"]) == 1  # epoch 0 trained, epoch 1 diverged
    for name in ("exact", "naive"):
        assert len(records[name]["epochs"]) == 2 and records[name]["final"]["test_acc"] >= 0
        assert records[name]["choices"]["devices"] == "cpu2"
        assert records[name]["config"]["engine"] == {"name": "gpipe", "devices": ["cpu", "cpu"],
                                                     "balance": None, "checkpoint": "except_last",
                                                     "timeline": True, "trace_epoch": 1}
    df = load(sweep)
    assert len(df) == 4 and sorted(df["status"]) == ["completed", "completed", "failed", "invalid"]
    # The failures are named on stderr and in the sweep's log: number, overrides, status, error.
    _check_failures_named(proc.stderr, sweep)
    _check_failures_named((sweep / "sweep.log").read_text(), sweep)

    # Same command with resume=true: the completed jobs are skipped, the other two run again.
    mtimes = {v: (sweep / str(i) / "result.json").stat().st_mtime_ns for i, v in enumerate(VARIANTS)}
    again = _sweep(tmp_path, variants, sweep, "resume=true")
    assert again.returncode == 1, again.stderr[-3000:]
    log = again.stdout
    assert "job 0 skipped: completed" in log and "job 1 skipped: completed" in log
    assert "job 2 resume: running (previous record is invalid)" in log
    assert "job 3 resume: running (previous record is failed)" in log
    assert log.count("skipped: completed") == 2
    after = {v: (sweep / str(i) / "result.json").stat().st_mtime_ns for i, v in enumerate(VARIANTS)}
    assert [v for v in VARIANTS if after[v] != mtimes[v]] == ["too_many_chunks", "diverging"]
    assert {v: r["status"] for v, r in _records(sweep).items()} == EXPECTED
    assert "2 completed (2 skipped by resume), 1 failed, 1 invalid" in again.stderr
    _check_failures_named(again.stderr, sweep)
    assert len(load(sweep)) == 4


def test_joblib_launcher_gives_the_same_statuses(tmp_path: Path, variants: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = _sweep(tmp_path, variants, sweep, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in proc.stdout
    records = _records(sweep)
    assert {v: r["status"] for v, r in records.items()} == EXPECTED
    assert records["diverging"]["error"] == NAN_MESSAGE
    assert INVALID_MESSAGE in records["too_many_chunks"]["error"]
    _check_failures_named(proc.stderr, sweep)


def test_cli_rejects_schema_errors(tmp_path: Path) -> None:
    """experiments/train.py registers the schemas: a wrong type stops the command at composition.
    (A single run that fails exits non-zero too: tests/test_train.py.)"""
    bad = _cli(tmp_path, "chunks=abc", f"hydra.run.dir={tmp_path / 'bad'}")
    assert bad.returncode == 1
    assert "Error merging override chunks=abc" in bad.stderr
    assert "could not be converted to Integer" in bad.stderr
    assert not (tmp_path / "bad").exists()  # composition fails before any job


def test_lr_1e30_really_diverges() -> None:
    """The failure the sweep tests rely on is real: the trainer raises on the NaN loss."""
    record = run(make_cfg("train.lr=1e30", "train.epochs=3", "chunks=2"))
    assert record["status"] == "failed" and record["error"] == NAN_MESSAGE
    assert record["epochs"][0]["train_loss"] == pytest.approx(1.1, abs=0.2)


# --- resume -----------------------------------------------------------------------------------------

def _container(*overrides: str) -> dict:
    return OmegaConf.to_container(make_cfg(*overrides), resolve=True)


def test_resume_keeps_only_a_completed_record_of_the_same_config(tmp_path: Path) -> None:
    cfg = _container("chunks=2")
    assert completed_record(tmp_path, cfg) == (None, "no previous record")
    write_record(tmp_path, {"status": "failed", "config": cfg, "error": "boom"})
    assert completed_record(tmp_path, cfg) == (None, "previous record is failed")
    write_record(tmp_path, {"status": "completed", "config": cfg})
    record, reason = completed_record(tmp_path, cfg)
    assert record is not None and reason == "completed"
    # resume itself is volatile: a record made with resume=false is kept by a resume=true run
    assert completed_record(tmp_path, {**cfg, "resume": True})[0] is not None
    # the job's own output dir inside a path (a timestamped path) does not count as a change
    inside = {**cfg, "data": {**cfg["data"], "cache": f"{tmp_path}/cache"}}
    write_record(tmp_path, {"status": "completed", "config": inside})
    assert completed_record(tmp_path, inside)[0] is not None
    write_record(tmp_path, {"status": "completed", "config": cfg})
    record, reason = completed_record(tmp_path, _container("chunks=4"))
    assert record is None and reason == "config changed since the completed record: chunks: 2 -> 4"
    # a record older than a key that this config leaves null (a later option's default) is kept
    older = {**cfg, "train": {k: v for k, v in cfg["train"].items() if k != "checkpoint_every"}}
    write_record(tmp_path, {"status": "completed", "config": older})
    assert cfg["train"]["checkpoint_every"] is None and completed_record(tmp_path, cfg)[0] is not None
    assert completed_record(tmp_path, _container("chunks=2", "train.checkpoint_every=5"))[0] is None
    (tmp_path / "result.json").write_text("{not json")
    assert completed_record(tmp_path, cfg)[1].startswith("previous record unreadable")


def test_sweep_jobs_ignores_jobs_of_an_older_sweep(tmp_path: Path) -> None:
    marker = tmp_path / "multirun.yaml"  # what the sweeper writes before its first job
    marker.write_text("")
    since = marker.stat().st_mtime
    for job, status in ((0, "completed"), (1, "failed")):
        write_record(tmp_path / str(job), {"status": status, "error": "E: x\nmore" if job else None})
    os.utime(tmp_path / "1" / "result.json", (since - 10, since - 10))  # left from an older sweep
    jobs = sweep_jobs(tmp_path)
    assert [(j.num, j.status, j.error) for j in jobs] == [(0, "completed", None), (1, "failed", "E: x")]
    assert [j.num for j in sweep_jobs(tmp_path, since)] == [0]


def _killed_sweep(sweep: Path) -> Path:
    """A sweep of 4 jobs (chunks=2,4 x +variant=a,b) in folders named by their overrides, killed during
    job 2: job 0 completed, job 1 started and left no record, job 2 left a malformed one, job 3 never
    started. Its multirun.yaml (written by the basic sweeper before the first job) is older than the jobs."""
    params = [["chunks=2", "+variant=a"], ["chunks=2", "+variant=b"], ["chunks=4", "+variant=a"],
              ["chunks=4", "+variant=b"]]
    sweep.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create({"chunks": 4, "dataset": {"name": "synthetic"}, "hydra": {
        "sweep": {"dir": str(sweep), "subdir": "${hydra.job.override_dirname}"},
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "overrides": {"task": ["chunks=2,4", "+variant=a,b"]},
        "job": {"num": "???", "id": "???", "override_dirname": "chunks=2,4,+variant=a,b",
                "config": {"override_dirname": {"kv_sep": "=", "item_sep": ",", "exclude_keys": []}}},
        "runtime": {"choices": {"dataset": "synthetic", "hydra/launcher": "basic"}}}}), sweep / "multirun.yaml")
    old = (sweep / "multirun.yaml").stat().st_mtime - 5
    os.utime(sweep / "multirun.yaml", (old, old))
    for num, overrides in enumerate(params[:3]):
        job = sweep / ",".join(sorted(overrides))
        (job / ".hydra").mkdir(parents=True)
        OmegaConf.save(OmegaConf.create(overrides), job / ".hydra" / "overrides.yaml")
        OmegaConf.save(OmegaConf.create({"chunks": 2 if num < 2 else 4}), job / ".hydra" / "config.yaml")
        OmegaConf.save(OmegaConf.create({"hydra": {"job": {"num": num}}}), job / ".hydra" / "hydra.yaml")
    write_record(sweep / "+variant=a,chunks=2", {"status": "completed", "error": None})
    write_record(sweep / "+variant=a,chunks=4", {"status": "completed", "final": []})
    return sweep


def test_sweep_jobs_name_the_jobs_a_killed_sweep_left_without_a_record(tmp_path: Path) -> None:
    sweep = _killed_sweep(tmp_path / "sweep")
    dirs = ["+variant=a,chunks=2", "+variant=b,chunks=2", "+variant=a,chunks=4", "+variant=b,chunks=4"]
    assert planned_jobs(sweep) == [(o.split(","), sweep / d) for o, d in zip(
        ["chunks=2,+variant=a", "chunks=2,+variant=b", "chunks=4,+variant=a", "chunks=4,+variant=b"], dirs)]
    assert planned_jobs(tmp_path) is None  # no multirun.yaml
    since = (sweep / "multirun.yaml").stat().st_mtime
    jobs = sweep_jobs(sweep, since)
    assert [(j.num, j.directory, j.status) for j in jobs] == [
        (0, sweep / dirs[0], "completed"), (1, sweep / dirs[1], "incomplete"), (2, sweep / dirs[2], "unreadable"),
        (3, sweep / dirs[3], "missing")]
    assert jobs[1].error.startswith("no result.json") and jobs[1].config == {"chunks": 2}
    assert jobs[2].error == "malformed record: 'final' is an array, expected an object"
    assert jobs[3].error == "never started: job 3 of the sweep (chunks=4 +variant=b)"
    assert (jobs[3].config, jobs[3].choices) == ({"chunks": 4}, {"variant": "b"})
    # jobs of an older sweep in the same folder do not stand for this one's
    later = since + 100
    os.utime(sweep / "multirun.yaml", (later, later))
    assert [j.status for j in sweep_jobs(sweep, later)] == ["missing"] * 4

    os.utime(sweep / "multirun.yaml", (since, since))
    FailureSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    assert exit_code() == 1
    log = (sweep / "sweep.log").read_text()
    assert "4 jobs: 1 completed, 1 incomplete, 1 missing, 1 unreadable" in log
    assert "job 1 [chunks=2 +variant=b] incomplete: no result.json" in log
    assert "job 3 [chunks=4 +variant=b] missing: never started" in log
    FailureSummary().on_multirun_start(OmegaConf.create({}))
    assert exit_code() == 0


def test_resume_reruns_a_malformed_record(tmp_path: Path) -> None:
    cfg = _container("chunks=2")
    write_record(tmp_path, {"status": "completed", "config": cfg, "epochs": 3})
    record, reason = completed_record(tmp_path, cfg)
    assert record is None
    assert reason == "previous record unreadable (malformed record: 'epochs' is a number, expected an array)"


# --- progress -----------------------------------------------------------------------------------------

class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_follows_the_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar advances with each finished epoch ``run`` hands to ``on_epoch``; the per-epoch log lines
    stay off the terminal while it runs and come back after."""
    from pipegnn.train import EPOCH_LINE

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    console = logging.StreamHandler(term)
    root = logging.getLogger()
    root.addHandler(console)
    logger = logging.getLogger("pipegnn.train")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with EpochProgress(3, enabled=True, desc="job 7") as progress:
            record = run(make_cfg("train.epochs=3"), on_epoch=progress)
        assert record["status"] == "completed", record["error"]
        logger.info("epoch %3d  after", 9, extra=EPOCH_LINE)  # the bar is gone: lines reach the console
        with EpochProgress(3, enabled=False) as off:
            off({"epoch": 0, "train_loss": 1.0, "val_acc": 0.5})
    finally:
        root.removeHandler(console)
        logger.setLevel(level)
    text = term.getvalue()
    last = record["epochs"][-1]
    assert "job 7: 100%" in text and "3/3" in text
    assert f"loss={last['train_loss']:.4f}, val={last['val_acc']:.3f}" in text
    assert "epoch   0  loss" not in text  # muted on the terminal while the bar ran
    assert "done: test acc" in text and "epoch   9  after" in text
    assert console.filters == []


# --- presets -------------------------------------------------------------------------------------------

def _compose(*overrides: str, hydra: bool = False):
    return compose_config(overrides, return_hydra_config=hydra)


def _jobs(params: dict) -> list[list[str]]:
    """The jobs the basic sweeper makes of ``hydra.sweeper.params`` (same parser and product)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return BasicSweeper.split_arguments(parsed, None)[0]


def _axes(cfg) -> dict[str, list[str]]:
    return {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}


#: Every preset but smoke sweeps 5 seeds.
SEEDS = {"train.seed": ["0", "1", "2", "3", "4"]}
PRESETS = {
    "poster_pubmed": {"framework": ["pyg", "dgl"], "chunks": ["1", "2", "4", "8", "16", "32"],
                      "devices": ["cpu", "gpu", "gpu4"], "microbatch.halo": ["none", "exact"], **SEEDS},
    "poster_offline": {"dataset": ["synthetic", "cora"], "framework": ["pyg", "dgl"], "devices": ["cpu2"],
                       "chunks": ["1", "2", "4", "8", "16", "32"], "microbatch.halo": ["none", "exact"],
                       **SEEDS},
    "halo_modes": {"microbatch.halo": ["none", "exact", "historical"],
                   "microbatch.partition": ["sequential", "random", "bfs", "metis"],
                   "chunks": ["2", "8", "32"], **SEEDS},
    "scaling": {"dataset.num_nodes": ["8192", "16384", "32768", "65536", "131072"], "chunks": ["1", "8"],
                "model": ["gcn", "gat"], **SEEDS},
    "smoke": {"chunks": ["1", "2"], "microbatch.halo": ["none", "exact"]},
    "deep": {"dataset": ["cora", "citeseer"], "deep": ["full", "historical_k2", "historical_k4", "historical_k8"],
             "train.seed": [str(s) for s in range(10)]},
    **{f"ablation_{axis}": {key: values, "framework": ["pyg", "dgl"], "model": ["gcn", "gat"],
                            "chunks": ["1", "8"], **SEEDS}
       for axis, key, values in (("nodes", "dataset.num_nodes", ["8000", "16000", "32000"]),
                                 ("density", "dataset.density", ["0.0002", "0.0004", "0.0008"]),
                                 ("hidden", "model.hidden", ["16", "32", "64"]))},
}
#: Settings x 5 seeds (deep: 10, as its headline table); smoke, which reproduces no result, has no seed axis.
NUM_JOBS = {"deep": 80, "poster_pubmed": 360, "poster_offline": 240, "halo_modes": 180, "scaling": 100, "smoke": 4,
            "ablation_nodes": 120, "ablation_density": 120, "ablation_hidden": 120}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_experiment_preset_axes(name: str) -> None:
    cfg = _compose(f"experiment={name}", hydra=True)
    assert _axes(cfg) == PRESETS[name]
    assert len(_jobs(dict(cfg.hydra.sweeper.params))) == NUM_JOBS[name]
    assert cfg.hydra.runtime.choices.experiment == name
    assert str(cfg.hydra.sweep.dir).startswith(f"multirun/{name}/")
    assert (CONF / "experiment" / f"{name}.yaml").read_text().startswith("# @package _global_\n")


def test_poster_pubmed_settings() -> None:
    cfg = _compose("experiment=poster_pubmed")
    assert (cfg.dataset.name, cfg.model.name, cfg.model.layers) == ("pubmed", "gat", 2)
    assert (cfg.microbatch.partition, cfg.microbatch.targets, cfg.train.epochs) == ("sequential", "train", 200)
    assert (cfg.model.heads, cfg.model.hidden, cfg.model.out_heads, cfg.train.lr) == (8, 8, 8, 0.01)
    # each job composes; gpu4 gets one of the GAT's 4 units per GPU
    job = _compose("experiment=poster_pubmed", "framework=dgl", "chunks=32", "devices=gpu4",
                   "microbatch.halo=exact")
    assert list(job.engine.devices) == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert (job.framework.name, job.chunks, job.microbatch.halo) == ("dgl", 32, "exact")


def test_poster_offline_settings() -> None:
    cfg = _compose("experiment=poster_offline")
    assert (cfg.model.name, cfg.model.layers, cfg.train.epochs) == ("gat", 2, 100)
    assert cfg.microbatch.partition == "sequential"
    for dataset in ("synthetic", "cora"):
        job = _compose("experiment=poster_offline", f"dataset={dataset}", "devices=cpu2")
        assert job.dataset.name == dataset and job.train.epochs == 100
        assert (job.engine.name, list(job.engine.devices)) == ("gpipe", ["cpu", "cpu"])
        check_config(OmegaConf.to_container(job, resolve=True))


def test_halo_modes_scaling_and_smoke_settings() -> None:
    halo = _compose("experiment=halo_modes")
    assert (halo.dataset.name, halo.model.name, halo.engine.name, halo.train.epochs) == \
        ("cora", "gat", "gpipe", 200)
    scaling = _compose("experiment=scaling", "dataset.num_nodes=131072", "model=gcn", "chunks=8")
    assert (scaling.dataset.name, scaling.dataset.num_nodes, scaling.dataset.avg_degree) == \
        ("synthetic", 131072, 4.5)
    assert scaling.dataset.density is None and scaling.train.epochs == 20
    assert (scaling.microbatch.targets, scaling.microbatch.halo) == ("all", "exact")
    assert (scaling.model.name, scaling.chunks) == ("gcn", 8)
    smoke = _compose("experiment=smoke")
    assert (smoke.dataset.num_nodes, smoke.train.epochs, list(smoke.engine.devices)) == (400, 3, ["cpu", "cpu"])


@pytest.mark.parametrize("axis", ["nodes", "density", "hidden"])
def test_ablation_settings(axis: str) -> None:
    job = _compose(f"experiment=ablation_{axis}", "model=gat", "model.hidden=64", "chunks=8")
    assert (job.dataset.preset, job.dataset.num_nodes, job.dataset.density) == (f"synthetic_{axis}", 32000, 0.0008)
    assert job.dataset.avg_degree is None and (job.model.name, job.model.hidden) == ("gat", 64)
    assert (job.engine.name, job.microbatch.halo, job.microbatch.partition, job.microbatch.targets) == \
        ("single", "exact", "metis", "all")
    assert job.train.epochs == 5
    check_config(OmegaConf.to_container(job, resolve=True))


# --- devices ---------------------------------------------------------------------------------------------

TIMELINE = {"timeline": True, "trace_epoch": 1}
DEVICES = {
    "cpu": {"name": "single", "device": "cpu", **TIMELINE},
    "gpu": {"name": "single", "device": "cuda:0", **TIMELINE},
    "cpu2": {"name": "gpipe", "devices": ["cpu", "cpu"], "balance": None, "checkpoint": "except_last",
             **TIMELINE},
    "cpu4": {"name": "gpipe", "devices": ["cpu"] * 4, "balance": None, "checkpoint": "except_last",
             **TIMELINE},
    "gpu2": {"name": "gpipe", "devices": ["cuda:0", "cuda:1"], "balance": None, "checkpoint": "except_last",
             **TIMELINE},
    "gpu4": {"name": "gpipe", "devices": [f"cuda:{i}" for i in range(4)], "balance": None,
             "checkpoint": "except_last", **TIMELINE},
}


@pytest.mark.parametrize("preset", sorted(DEVICES))
def test_devices_preset(preset: str) -> None:
    cfg = _compose(f"devices={preset}", hydra=True)
    assert OmegaConf.to_container(cfg.engine) == DEVICES[preset]
    assert cfg.hydra.runtime.choices.devices == preset
    assert cfg.hydra.runtime.choices.engine == DEVICES[preset]["name"]
    container = OmegaConf.to_container(_compose(f"devices={preset}"), resolve=True)
    if preset.startswith("gpu") and not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            check_config(container)
    elif preset == "cpu4":  # four stages need four units: two layers
        check_config(container)
        with pytest.raises(ConfigError, match=r"engine.devices has 4 devices but the model has only 2 "
                                              r"units \(model.layers=1"):
            check_config(OmegaConf.to_container(_compose("devices=cpu4", "model.layers=1"), resolve=True))
    else:
        check_config(container)


def test_engine_choice_without_devices_is_unchanged() -> None:
    gpipe = _compose(hydra=True)
    assert gpipe.hydra.runtime.choices.devices is None
    assert OmegaConf.to_container(gpipe.engine) == DEVICES["cpu2"]
    single = _compose("engine=single", hydra=True)
    assert OmegaConf.to_container(single.engine) == DEVICES["cpu"]
    assert single.hydra.runtime.choices.devices is None
    tuned = _compose("devices=cpu2", "engine.checkpoint=never", "engine.balance=[1,1]")
    assert (tuned.engine.checkpoint, list(tuned.engine.balance)) == ("never", [1, 1])


# --- schemas ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, message", [
    ("model.hiden=8", "Could not override 'model.hiden'"),
    ("chunks=abc", "Value 'abc' of type 'str' could not be converted to Integer"),
    ("train.lr=fast", "Value 'fast' of type 'str' could not be converted to Float"),
    ("dataset.num_nodes=1.5", "Value '1.5' of type 'float' could not be converted to Integer"),
    ("resume=maybe", "Value 'maybe' is not a valid bool"),
    ("engine.devices=cpu", "Invalid value assigned: str is not a ListConfig, list or tuple"),
])
def test_schema_errors_fail_at_composition(override: str, message: str) -> None:
    with pytest.raises(ConfigCompositionException) as info:
        make_cfg(override)
    text = f"{info.value}\n{info.value.__cause__}"
    assert message in text, text


def test_schemas_type_each_group_and_allow_documented_nulls() -> None:
    cfg = make_cfg("dataset.power_law=2.5", "data.root=null", "microbatch.cache=null")
    for node, schema in ((cfg, "Config"), (cfg.dataset, "SyntheticConfig"), (cfg.model, "GATConfig"),
                         (cfg.engine, "GPipeEngineConfig"), (cfg.train, "TrainConfig"),
                         (cfg.microbatch, "MicrobatchConfig"), (cfg.framework, "FrameworkConfig")):
        assert OmegaConf.get_type(node).__name__ == schema
    assert (cfg.dataset.power_law, cfg.data.root, cfg.microbatch.cache) == (2.5, None, None)
    assert OmegaConf.get_type(make_cfg("model=gcn").model).__name__ == "ModelConfig"
    assert OmegaConf.get_type(make_cfg("engine=single").engine).__name__ == "SingleEngineConfig"
    with pytest.raises(ConfigCompositionException, match="model.heads"):
        make_cfg("model=gcn", "model.heads=2")  # GCN has no heads
    with pytest.raises(ConfigCompositionException, match="dataset.num_nodes"):
        make_cfg("dataset=cora", "dataset.num_nodes=10")  # a Planetoid graph is only a name


# --- every preset's first job, for real -----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_first_job_runs(tmp_path: Path, name: str) -> None:
    """Each preset's first job (first value of every axis) through the CLI, 1 epoch on the tiny
    synthetic graph in place of the preset's dataset (a synthetic preset keeps its own settings, such
    as a density, and its axis value unless the tiny graph sets that key)."""
    cfg = _compose(f"experiment={name}", hydra=True)
    first = _jobs(dict(cfg.hydra.sweeper.params))[0]
    tiny = {o.split("=")[0] for o in TINY_SYNTHETIC}
    synthetic = cfg.dataset.name == "synthetic"
    job = [o for o in first if not o.startswith(("dataset=", "dataset."))
           or (synthetic and o.startswith("dataset.") and o.split("=")[0] not in tiny)]
    # the dataset is pinned on the command line, which also replaces a dataset axis of the sweep
    dataset = [f"dataset={cfg.hydra.runtime.choices.dataset}" if synthetic else "dataset=synthetic"]
    sweep = tmp_path / "sweep"
    proc = _cli(tmp_path, "-m", f"experiment={name}", *job, *dataset, *TINY_SYNTHETIC,
                "train.epochs=1", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert len(records) == 1 and records[0]["status"] == "completed", records[0].get("error")
    record = records[0]
    assert record["choices"]["experiment"] == name and len(record["epochs"]) == 1
    for override in job:
        key, value = override.split("=", 1)
        if key in ("framework", "model", "devices", "deep") or key.startswith("+"):
            assert record["choices"][key.lstrip("+")] == value
        else:
            node = record["config"]
            for part in key.split("."):
                node = node[part]
            assert str(node) == value
