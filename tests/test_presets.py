"""The sweep presets (conf/experiment/), device presets and the typed schemas: what they compose to."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from pipegnn.config.schema import compose_config
from pipegnn.errors import ConfigError
from pipegnn.training.launch import check_run

from tests.helpers import CONF, TINY_SYNTHETIC, cli, make_cfg


def _compose(*overrides: str, hydra: bool = False):
    return compose_config(overrides, return_hydra_config=hydra)


def _jobs(params: dict) -> list[list[str]]:
    """The jobs the basic sweeper makes of ``hydra.sweeper.params`` (same parser and product)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return BasicSweeper.split_arguments(parsed, None)[0]


def _axes(cfg) -> dict[str, list[str]]:
    return {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}


#: The time-to-accuracy map's settings (conf/map_setting/).
MAP_SETTINGS = ["full", "exact_k8", "exact_k32", "historical_k8", "historical_k32", "sampled10_k8",
                "sampled10_k32", "sampled25_k8", "sampled25_k32"]
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
    "deep": {"dataset": ["cora", "citeseer"],
             "deep": ["full", "historical_k2", "historical_k4", "historical_k8"],
             "train.seed": [str(s) for s in range(10)]},
    "historical_gap": {"microbatch.halo": ["exact", "historical"], "microbatch.targets": ["train", "all"],
                       "chunks": ["2", "8"], "train.seed": [str(s) for s in range(10)]},
    "study_accuracy": {"dataset": ["coauthor_physics", "amazon_computers"], "model": ["gcn", "gat", "sage"],
                       "train.seed": [str(s) for s in range(10)]},
    "study_pipelines": {"dataset": ["coauthor_physics", "amazon_computers"], "model": ["gcn", "gat", "sage"],
                        "engine": ["gpipe", "pipelining"], "train.seed": [str(s) for s in range(10)]},
    "study_poster": {"dataset": ["amazon_computers", "coauthor_physics"],
                     "chunks": ["1", "2", "4", "8", "16", "32"],
                     "microbatch.halo": ["none", "exact", "historical"],
                     "microbatch.partition": ["sequential", "metis"], "train.seed": ["0", "1", "2"]},
    **{name: {"dataset": datasets, "model": ["gcn", "gat"], "map_setting": MAP_SETTINGS,
              "map_runner": ["process", "pipeline"], **SEEDS}
       for name, datasets in (("sampled_map", ["amazon_computers_dense", "coauthor_physics_dense"]),
                              ("sampled_map_synthetic", ["synthetic_pubmed_dense", "synthetic_1m_dense"]))},
    **{f"ablation_{axis}": {key: values, "framework": ["pyg", "dgl"], "model": ["gcn", "gat"],
                            "chunks": ["1", "8"], **SEEDS}
       for axis, key, values in (("nodes", "dataset.num_nodes", ["8000", "16000", "32000"]),
                                 ("density", "dataset.density", ["0.0002", "0.0004", "0.0008"]),
                                 ("hidden", "model.hidden", ["16", "32", "64"]))},
}
#: Settings x 5 seeds (deep and historical_gap: 10, as their headline tables); smoke, which reproduces no
#: result, has no seed axis.
NUM_JOBS = {"deep": 80, "historical_gap": 80, "study_accuracy": 60, "study_pipelines": 120,
            "study_poster": 216, "sampled_map": 360, "sampled_map_synthetic": 360,
            "poster_pubmed": 360, "poster_offline": 240, "halo_modes": 180, "scaling": 100, "smoke": 4,
            "ablation_nodes": 120, "ablation_density": 120, "ablation_hidden": 120}


def test_every_preset_is_checked_here() -> None:
    assert sorted(PRESETS) == sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


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
    assert (cfg.microbatch.partition, cfg.microbatch.targets, cfg.train.epochs) == \
        ("sequential", "train", 200)
    assert (cfg.model.heads, cfg.model.hidden, cfg.model.out_heads, cfg.train.lr) == (8, 8, 8, 0.01)
    # each job composes; gpu4 gets one of the GAT's 4 units per GPU
    job = _compose("experiment=poster_pubmed", "framework=dgl", "chunks=32", "devices=gpu4",
                   "microbatch.halo=exact")
    assert list(job.engine.devices) == ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]
    assert (job.framework.name, job.chunks, job.microbatch.halo) == ("dgl", 32, "exact")


def test_study_poster_evaluates_layerwise_unless_naive() -> None:
    """The poster's sweep on the study's graphs: exact and historical halos evaluate layer by layer, the
    naive ones (halo=none) their own induced subgraphs; every halo composes to a valid run."""
    for halo, evaluation in (("none", "plan"), ("exact", "layerwise"), ("historical", "layerwise")):
        job = _compose("experiment=study_poster", f"microbatch.halo={halo}", "chunks=32")
        assert job.microbatch.evaluation == evaluation
        check_run(OmegaConf.to_container(job, resolve=True))


def test_poster_offline_settings() -> None:
    cfg = _compose("experiment=poster_offline")
    assert (cfg.model.name, cfg.model.layers, cfg.train.epochs) == ("gat", 2, 100)
    assert cfg.microbatch.partition == "sequential"
    for dataset in ("synthetic", "cora"):
        job = _compose("experiment=poster_offline", f"dataset={dataset}", "devices=cpu2")
        assert job.dataset.name == dataset and job.train.epochs == 100
        assert (job.engine.name, list(job.engine.devices)) == ("gpipe", ["cpu", "cpu"])
        check_run(OmegaConf.to_container(job, resolve=True))


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
    assert (smoke.dataset.num_nodes, smoke.train.epochs, list(smoke.engine.devices)) == \
        (400, 3, ["cpu", "cpu"])


@pytest.mark.parametrize("axis", ["nodes", "density", "hidden"])
def test_ablation_settings(axis: str) -> None:
    job = _compose(f"experiment=ablation_{axis}", "model=gat", "model.hidden=64", "chunks=8")
    assert (job.dataset.preset, job.dataset.num_nodes, job.dataset.density) == \
        (f"synthetic_{axis}", 32000, 0.0008)
    assert job.dataset.avg_degree is None and (job.model.name, job.model.hidden) == ("gat", 64)
    assert (job.engine.name, job.microbatch.halo, job.microbatch.partition, job.microbatch.targets) == \
        ("single", "exact", "metis", "all")
    assert job.train.epochs == 5
    check_run(OmegaConf.to_container(job, resolve=True))


# --- devices ---------------------------------------------------------------------------------------------

EVERY_ENGINE = {"threads": None, "timeline": True, "trace_epoch": 1, "capture": "none"}
DEVICES = {
    "cpu": {"name": "single", "device": "cpu", **EVERY_ENGINE},
    "gpu": {"name": "single", "device": "cuda:0", **EVERY_ENGINE},
    "cpu2": {"name": "gpipe", "devices": ["cpu", "cpu"], "balance": None, "checkpoint": "except_last",
             **EVERY_ENGINE},
    "cpu4": {"name": "gpipe", "devices": ["cpu"] * 4, "balance": None, "checkpoint": "except_last",
             **EVERY_ENGINE},
    "gpu2": {"name": "gpipe", "devices": ["cuda:0", "cuda:1"], "balance": None, "checkpoint": "except_last",
             **EVERY_ENGINE},
    "gpu4": {"name": "gpipe", "devices": [f"cuda:{i}" for i in range(4)], "balance": None,
             "checkpoint": "except_last", **EVERY_ENGINE},
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
            check_run(container)
    elif preset == "cpu4":  # four stages need four units: two layers
        check_run(container)
        with pytest.raises(ConfigError, match=r"engine.devices has 4 devices but the model has only 2 "
                                              r"units \(model.layers=1"):
            check_run(OmegaConf.to_container(_compose("devices=cpu4", "model.layers=1"), resolve=True))
    else:
        check_run(container)


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
    proc = cli(tmp_path, "-m", f"experiment={name}", *job, *dataset, *TINY_SYNTHETIC,
                "train.epochs=1", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert len(records) == 1 and records[0]["status"] == "completed", records[0].get("error")
    record = records[0]
    assert record["choices"]["experiment"] == name and len(record["epochs"]) == 1
    for override in job:
        key, value = override.split("=", 1)
        if key in ("framework", "model", "devices", "deep", "engine", "map_setting", "map_runner") or \
                key.startswith("+"):
            assert record["choices"][key.lstrip("+")] == value
        else:
            node = record["config"]
            for part in key.split("."):
                node = node[part]
            assert str(node) == value


@pytest.mark.parametrize("runner", ["process", "pipeline"])
def test_sampled_map_settings(runner: str) -> None:
    """Every setting of the map composes to a valid run: full batch is one chunk, the others METIS
    micro-batches of their halo (sampled ones with their fan-outs); the baseline is one process with 2
    threads, the pipeline 2 processes of 1; the real graphs' split is dense."""
    expected = {"full": (1, "none", None, "plan"), "exact_k8": (8, "exact", None, "layerwise"),
                "historical_k32": (32, "historical", None, "layerwise"),
                "sampled10_k32": (32, "sampled", [10, 10], "layerwise"),
                "sampled25_k8": (8, "sampled", [25, 10], "layerwise")}
    for setting, (chunks, halo, fanouts, evaluation) in expected.items():
        job = _compose("experiment=sampled_map", f"map_setting={setting}", f"map_runner={runner}",
                       "dataset=coauthor_physics_dense", "model=gat")
        assert (job.chunks, job.microbatch.halo, job.microbatch.fanouts) == (chunks, halo, fanouts)
        assert job.microbatch.evaluation == evaluation
        assert (job.dataset.name, job.dataset.split, job.microbatch.partition) == \
            ("coauthor_physics", "random", "metis")
        assert (job.engine.name, job.engine.threads) == (("single", 2) if runner == "process"
                                                         else ("pipelining", 1))
        # the study's GAT settings, features sparse
        assert (job.model.dropout, job.train.patience, job.data.features) == (0.6, 50, "sparse")
        check_run(OmegaConf.to_container(job, resolve=True))
    synthetic = _compose("experiment=sampled_map_synthetic", "dataset=synthetic_1m_dense")
    dataset = synthetic.dataset
    assert (dataset.num_nodes, dataset.train_per_class * 3, dataset.num_val) == (1_000_000, 600_000, 200_000)
    deep = _compose("experiment=sampled_map", "map_setting=sampled25_k8", "model=gcn2", "model.layers=16")
    with pytest.raises(ConfigError, match="has 2 entries for a model of 16 layers"):
        check_run(OmegaConf.to_container(deep, resolve=True))
