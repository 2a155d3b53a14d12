"""The Hydra config composes as documented, and every invalid input fails before training."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf

from pipegnn import run
from pipegnn.training.launch import check_run

from tests.helpers import make_cfg, shared_datasets


def test_defaults() -> None:
    cfg = make_cfg()
    assert (cfg.dataset.name, cfg.model.name, cfg.framework.name, cfg.engine.name) == \
        ("synthetic", "gat", "pyg", "gpipe")
    assert (cfg.model.hidden, cfg.model.heads, cfg.model.dropout) == (8, 8, 0.6)
    assert (cfg.microbatch.halo, cfg.microbatch.partition) == ("exact", "metis")
    assert list(cfg.engine.devices) == ["cpu", "cpu"]
    assert cfg.train.precision == "fp32"
    check_run(OmegaConf.to_container(cfg, resolve=True))


@pytest.mark.parametrize("dataset", ["cora", "citeseer", "pubmed", "synthetic"])
def test_dataset_choice(dataset: str) -> None:
    assert make_cfg(f"dataset={dataset}").dataset.name == dataset


def test_model_defaults_follow_the_papers() -> None:
    gcn = make_cfg("model=gcn")
    assert (gcn.model.hidden, gcn.model.dropout, gcn.train.lr) == (16, 0.5, 0.01)
    gat = make_cfg("dataset=cora", "model=gat")
    assert (gat.train.lr, gat.model.out_heads) == (0.005, 1)
    pubmed = make_cfg("dataset=pubmed", "model=gat")  # the GAT paper's PubMed settings
    assert (pubmed.model.out_heads, pubmed.train.lr, pubmed.train.weight_decay) == (8, 0.01, 0.001)
    for dataset in ("synthetic", "synthetic_pubmed"):  # the same with the Cora learning rate (steadier)
        cfg = make_cfg(f"dataset={dataset}", "model=gat")
        assert (cfg.model.out_heads, cfg.train.lr, cfg.train.weight_decay) == (8, 0.005, 0.001)


def test_documented_overrides() -> None:
    cfg = make_cfg("engine=single", "chunks=8", "microbatch.halo=none", "microbatch.partition=random",
                   "train.epochs=7", "train.seed=3", "train.lr=0.1", "model.dropout=0",
                   "model.hidden=32", "model.layers=3", "data.root=/somewhere")
    assert cfg.engine.name == "single" and cfg.engine.device == "cpu"
    assert (cfg.chunks, cfg.microbatch.halo, cfg.microbatch.partition) == (8, "none", "random")
    assert (cfg.train.epochs, cfg.train.seed, cfg.train.lr, cfg.microbatch.seed) == (7, 3, 0.1, 3)
    assert (cfg.model.dropout, cfg.model.hidden, cfg.model.layers) == (0, 32, 3)
    assert cfg.data.root == "/somewhere"


def test_unknown_dataset_group_fails_at_composition() -> None:
    with pytest.raises(MissingConfigException, match="imagenet"):
        make_cfg("dataset=imagenet")


@pytest.mark.parametrize("overrides, message", [
    (["dataset.split=random", "dataset.val_fraction=0"],  # was a completed run with NaN accuracy
     "dataset 'amazon_computers' has no val nodes (dataset.split=random: dataset.val_fraction=0.0)"),
    (["dataset.val_per_class=0"],
     "dataset 'amazon_computers' has no val nodes (dataset.split=per_class: dataset.val_per_class=0)"),
    (["dataset.split=random", "dataset.train_fraction=1e-9"],  # was "use chunks <= 0"
     "dataset 'amazon_computers' has no train nodes (dataset.split=random: dataset.train_fraction=1e-09)"),
])
def test_an_empty_split_is_invalid_before_training(tmp_path: Path, overrides: list[str],
                                                   message: str) -> None:
    root = shared_datasets()
    if root is None:
        pytest.skip("Amazon Computers' raw file not found: set $PIPEGNN_DATA or place ../shared/datasets")
    record = run(make_cfg("dataset=amazon_computers", f"data.root={root}", f"data.cache={tmp_path}/cache",
                          *overrides))
    assert record["status"] == "invalid" and message in record["error"], record["error"]
    assert record["epochs"] == []


@pytest.mark.parametrize("overrides, message", [
    (["chunks=0"], "chunks must be an integer >= 1, got 0"),
    (["chunks=31"], "chunks=31 is larger than the number of training targets (30)"),
    (["engine.balance=[1,2]"], "engine.balance=[1, 2] does not match the model"),
    (["engine.devices=[cpu,cpu,cpu,cpu,cpu]"], "has 5 devices but the model has only 4 units"),
    (["engine.devices=[cpu,tpu]"], "engine.devices[1]"),
    (["engine=single", "engine.device=cuda:0"], "CUDA is not available"),
    (["dataset.num_val=0"], "has no val nodes; every split needs at least one node"),
    (["engine=single", "+engine.balance=auto"],
     "engine.balance is not a key of SingleEngineConfig; its keys: "
     "name, threads, timeline, trace_epoch, capture, device"),
])
def test_invalid_input_is_recorded_before_training(tmp_path: Path, overrides: list[str],
                                                    message: str) -> None:
    import torch

    if "cuda" in " ".join(overrides) and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cfg = make_cfg(f"data.cache={tmp_path}/cache", *overrides)
    record = run(cfg, output_dir=tmp_path)
    assert record["status"] == "invalid"
    assert message in record["error"]
    assert record["epochs"] == []
    assert json.loads((tmp_path / "result.json").read_text())["error"] == record["error"]


#: A choice that is not one: (key, bad value, the valid ones as the message lists them).
BAD_CHOICES = [
    ("dataset.name", "imagenet",
     "cora, citeseer, pubmed, pubmed_topology, ogbn-arxiv, ogbn-products, reddit, amazon_computers, "
     "amazon_photo, coauthor_cs, coauthor_physics, synthetic"),
    ("microbatch.halo", "fancy", "none, exact, historical, sampled"),
    ("microbatch.targets", "some", "train, all"),
    ("microbatch.partition", "kmeans", "sequential, random, bfs, metis"),
    ("train.precision", "fp16", "fp32, bf16"),
    ("train.monitor", "val_f1", "val_acc, val_loss"),
    ("engine.checkpoint", "sometimes", "always, except_last, never"),
    ("data.features", "ssd", "memory, disk, sparse"),
    ("microbatch.halo_dropout", "each", "read, node"),
]


@pytest.mark.parametrize("key, value, valid", BAD_CHOICES)
def test_a_bad_choice_fails_at_composition(key: str, value: str, valid: str) -> None:
    """The schemas type every choice with its enum: composition names the value and the valid ones."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as info:
        make_cfg(f"{key}={value}")
    assert f"Invalid value '{value}', expected one of [{valid}]" in str(info.value.__cause__)


@pytest.mark.parametrize("key, value, valid", BAD_CHOICES)
def test_a_bad_choice_in_a_plain_config_is_invalid_before_training(tmp_path: Path, key: str, value: str,
                                                                    valid: str) -> None:
    """The same value in a plain config handed to ``run`` (a notebook's dict): an ``invalid`` record with
    one message naming the key, the value and the valid ones."""
    plain = OmegaConf.to_container(make_cfg(f"data.cache={tmp_path}/cache"), resolve=True)
    group, name = key.split(".")
    plain[group][name] = value
    record = run(plain, output_dir=tmp_path)
    assert record["status"] == "invalid"
    assert record["error"] == f"{key}={value!r} is not valid; valid: {valid}"
    assert record["epochs"] == []


@pytest.mark.parametrize("overrides, message", [
    (["model.heads=0"], "model.heads must be an integer >= 1, got 0"),
    (["model.heads=-2"], "model.heads must be an integer >= 1, got -2"),
    (["model.out_heads=0"], "model.out_heads must be an integer >= 1, got 0"),  # used to fail in step 1
    (["train.lr=-0.1"], "train.lr must be a finite number >= 0, got -0.1"),
    (["train.lr=nan"], "train.lr must be a finite number >= 0, got nan"),
    (["model=gcn", "model.lr=-1"], "train.lr must be a finite number >= 0, got -1"),  # train.lr: ${model.lr}
    (["train.weight_decay=-0.5"], "train.weight_decay must be a finite number >= 0, got -0.5"),
    (["train.weight_decay=inf"], "train.weight_decay must be a finite number >= 0, got inf"),
    (["train.seed=-1"], "train.seed must be an integer in [0, 2**63 - 1], got -1"),
    (["train.seed=18446744073709551616"],  # 2**64: torch's "Overflow when unpacking long long"
     "train.seed must be an integer in [0, 2**63 - 1], got 18446744073709551616"),
    (["microbatch.seed=-3"], "microbatch.seed must be an integer in [0, 2**63 - 1], got -3"),
    (["model=gcn", "model.hidden=0"], "model.hidden must be an integer >= 1, got 0"),
    (["model.layers=-1"], "model.layers must be an integer >= 1, got -1"),
    (["model.dropout=1"], "model.dropout must be in [0, 1), got 1.0"),
    (["train.epochs=0"], "train.epochs must be >= 1, got 0"),
    (["train.patience=0"],
     "train.patience must be a number of epochs >= 1 (or null: no early stopping), got 0"),
    (["train.target_val_acc=1.5"], "train.target_val_acc must be a validation accuracy in (0, 1]"),
    (["microbatch.halo=sampled"], "microbatch.halo=sampled needs microbatch.fanouts, one per layer (2): e.g. "
                                  "microbatch.fanouts=[10,10]"),
    (["microbatch.halo=sampled", "microbatch.fanouts=[10]"], "microbatch.fanouts=[10] has 1 entries for a "
                                                             "model of 2 layers"),
    (["microbatch.halo=sampled", "microbatch.fanouts=[10,0]"], "microbatch.fanouts=[10, 0]: 0 is not a "
                                                               "fan-out; each must be -1"),
    (["microbatch.halo=sampled", "microbatch.fanouts=[100000000000000000000,5]"],  # was an OverflowError
     "100000000000000000000 is not a fan-out; each must be -1 (every neighbour) or an integer from 1 to "
     "2147483646"),
    (["microbatch.halo=sampled", "microbatch.fanouts=[[1],[2]]"],  # was a TypeError
     "[1] is not a fan-out"),
    (["microbatch.halo=sampled", "microbatch.fanouts=[2147483647,5]"], "2147483647 is not a fan-out"),
    (["engine=pipelining", "engine.timeout_s=1e12"],  # was an OverflowError (a timedelta)
     "engine.timeout_s must be a finite number of seconds > 0 and <= 1e+09, got 1000000000000.0"),
    (["engine=pipelining", "engine.timeout_s=1e-9"],  # was accepted: every run ended before its first epoch
     "engine.timeout_s=1e-09 is shorter than a worker's start"),
    (["engine=pipelining", "engine.timeout_s=0.9999999"],  # named as given, not rounded to the bound
     "engine.timeout_s=0.9999999 is shorter than a worker's start"),
    (["microbatch.fanouts=[10,10]"], "microbatch.fanouts=[10, 10] samples neighbourhoods, which only "
                                     "microbatch.halo=sampled does (halo=exact)"),
    (["microbatch.halo=none", "microbatch.evaluation=layerwise"],
     "microbatch.evaluation=layerwise evaluates on the full graph, and microbatch.halo=none evaluates its "
     "own induced subgraphs"),
    # found by probing: overflows inside torch or OpenMP, a GCNII that trains to NaN
    (["train.memory_limit_gb=1e308"], "train.memory_limit_gb must be a finite number of GiB > 0 and <= "),
    (["engine=pipelining", "engine.memory_limit_gb=1e308"], "engine.memory_limit_gb must be a finite number"),
    (["engine.threads=1000000000000"], "engine.threads=1000000000000 is more than the 4,096 threads"),
    (["train.lr=1e300"], "train.lr must be a finite number >= 0, got 1e+300 (at most 3.4e+38"),
    (["model=gcn2", "model.layers=2", "model.theta=inf"], "model.theta (GCNII's identity mapping) must be a "
                                                          "finite number >= 0, got inf"),
    # widths past any memory: were `oom` records from inside torch
    (["model=gcn", "model.hidden=1000000000000"], "model.hidden=1000000000000: the model's weights need at "
                                                 "least "),
    (["model.hidden=1000000", "model.heads=1000000"], "model.hidden=1000000, model.heads=1000000: the "
                                                     "model's weights need at least "),
    # graphs past any memory: were `oom` records from inside the generator
    (["dataset.num_nodes=2000000000", "dataset.avg_degree=500"], "dataset.num_nodes=2000000000 with "
     "500,000,000,000 undirected edges, dataset.num_features=16 (data.features=memory), "),
    (["dataset.num_nodes=1000000", "dataset.avg_degree=null", "dataset.density=0.5"],
     "dataset.num_nodes=1000000 with 249,999,750,000 undirected edges, dataset.num_features=16"),
    # a vocabulary past memory: grew to 24 GB inside the generator, killed with no record at all
    (["dataset.num_features=2000000000"], "dataset.num_features=2000000000 (data.features=memory), "),
    (["dataset.num_features=20000000", "data.features=disk"], "dataset.num_features=20000000 "
     "(data.features=disk), "),
    # the documents' words and the communities past memory: `oom` records from inside the generator
    (["dataset.words_per_node=1000000000"], "dataset.words_per_node=1000000000 and "),
    (["dataset.num_communities=2000000000"], "dataset.num_communities=2000000000 need at least "),
    # depths past any model: a billion layer specifications were built before any check
    (["model.layers=1000000000"], "model.layers=1000000000 is past the deepest model pipegnn builds"),
    (["model.layers=4097", "microbatch.halo=sampled"], "model.layers=4097 is past the deepest model"),
])
def test_bad_numbers_are_invalid_before_training(tmp_path: Path, overrides: list[str], message: str) -> None:
    """A bad number is an ``invalid`` run naming the key, the value and what is valid, not torch's words
    from a ``failed`` one."""
    record = run(make_cfg(f"data.cache={tmp_path}/cache", *overrides), output_dir=tmp_path)
    assert record["status"] == "invalid", record["error"]
    assert message in record["error"]
    assert record["epochs"] == []


@pytest.mark.parametrize("overrides", [
    ["model.heads=1", "model.out_heads=1", "train.lr=0", "train.weight_decay=0", "train.seed=0"],
    ["microbatch.seed=9223372036854775807", "model.dropout=0"],
    ["model=gcn"],  # no heads to check
])
def test_edge_numbers_are_valid(overrides: list[str]) -> None:
    check_run(OmegaConf.to_container(make_cfg(*overrides), resolve=True))


def test_sage_is_a_typed_valid_model() -> None:
    """model=sage: GraphSAGE-mean with GCN's Cora settings, typed by its own schema (no heads), valid
    with both aggregations; an unknown model name lists it."""
    from hydra.errors import ConfigCompositionException

    from pipegnn.errors import ConfigError

    cfg = make_cfg("model=sage")
    assert (cfg.model.name, cfg.model.layers, cfg.model.hidden, cfg.model.dropout) == ("sage", 2, 16, 0.5)
    assert (cfg.train.lr, cfg.train.weight_decay) == (0.01, 5e-4)
    assert OmegaConf.get_type(cfg.model).__name__ == "ModelConfig"
    for framework in ("pyg", "dgl"):
        for aggregation in ("messages", "sparse"):
            sage = make_cfg("model=sage", f"framework={framework}", f"model.aggregation={aggregation}")
            check_run(OmegaConf.to_container(sage, resolve=True))
    with pytest.raises(ConfigCompositionException, match="model.heads"):
        make_cfg("model=sage", "model.heads=2")  # SAGE has no heads
    container = OmegaConf.to_container(cfg, resolve=True)
    container["model"]["name"] = "gin"
    with pytest.raises(ConfigError, match=r"model.name='gin' is not valid; valid: gat, gcn, sage"):
        check_run(container)


@pytest.mark.parametrize("overrides, targets", [
    ([], "train"), (["microbatch.halo=none"], "train"), (["microbatch.halo=historical"], "all"),
    (["microbatch.halo=historical", "microbatch.targets=train"], "train"),
    (["microbatch.halo=exact", "microbatch.targets=all"], "all"),
])
def test_targets_follow_the_halo_unless_set(overrides: list[str], targets: str) -> None:
    """microbatch.targets defaults to all for historical halos (train left every non-target row as stale
    as the last evaluation: ten points on a 64-layer GCNII) and train for the others; a value set is
    kept, and the composed config (so every record) holds the value used."""
    cfg = make_cfg(*overrides)
    assert cfg.microbatch.targets == targets
    assert OmegaConf.to_container(cfg, resolve=True)["microbatch"]["targets"] == targets


def test_historical_with_train_targets_warns_with_the_measured_cost(caplog: pytest.LogCaptureFixture) -> None:
    record = run(make_cfg("microbatch.halo=historical", "microbatch.targets=train", "model=gcn2",
                          "model.layers=4", "train.epochs=1"))
    assert record["status"] == "completed" and record["config"]["microbatch"]["targets"] == "train"
    (warning,) = [r.getMessage() for r in caplog.records if "microbatch.targets=train" in r.getMessage()]
    assert "ten points on a 64-layer GCNII" in warning
