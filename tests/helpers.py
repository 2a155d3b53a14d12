"""Helpers shared by the tests (the fixtures are in conftest.py): small graphs with the awkward cases, the
read-only raw datasets, tiny configs, float64 comparisons, helpers for dataset-cache tests (code-carrying
files, unwritable folders), runs without dropout, free ports and float64 ranks for the pipelining tests, a
hand-made pipeline for the timeline tests, and hand-made result records and sweeps for the tests of
pipegnn.results. Imported as ``from tests.helpers import ...``."""
from __future__ import annotations

import copy
import functools
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from torch_geometric.utils import coalesce

from pipegnn import build, run
from pipegnn.backends import get_backend
from pipegnn.config.schema import compose_config
from pipegnn.data import Graph
from pipegnn.engines import PipeliningEngine
from pipegnn.models import StagedGNN
from pipegnn.results.rows import flatten
from pipegnn.runs.record_writes import write_record
from pipegnn.timeline import PipelineInfo
from pipegnn.training.epochs import Trainee

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def shared_datasets() -> Path | None:
    """The read-only raw datasets ($PIPEGNN_DATA or ../shared/datasets), or None."""
    for candidate in (os.environ.get("PIPEGNN_DATA"), ROOT.parent / "shared" / "datasets"):
        if candidate and (Path(candidate) / "Cora" / "raw" / "ind.cora.x").is_file():
            return Path(candidate)
    return None


def random_graph(num_nodes: int = 50, num_edges: int = 160, num_features: int = 6,
                 num_classes: int = 3, seed: int = 0) -> Graph:
    """A directed random graph with self-loops, isolated nodes and one-way edges."""
    g = torch.Generator().manual_seed(seed)
    active = num_nodes - 5  # the last five nodes are isolated
    edge_index = torch.randint(active, (2, num_edges), generator=g)
    loops = torch.arange(0, active, 7).repeat(2, 1)  # some explicit self-loops
    edge_index = coalesce(torch.cat([edge_index, loops], 1), num_nodes=num_nodes)
    y = torch.randint(num_classes, (num_nodes,), generator=g)
    perm = torch.randperm(num_nodes, generator=g)
    masks = [torch.zeros(num_nodes, dtype=torch.bool) for _ in range(3)]
    for mask, ids in zip(masks, (perm[:20], perm[20:30], perm[30:45])):
        mask[ids] = True
    return Graph("random", torch.randn(num_nodes, num_features, generator=g), y, edge_index, *masks,
                 num_classes=num_classes)


#: The committed results: the reference set (each folder reproduced by its preset at this commit) and the
#: superseded folders (each reproduced by the commit results/superseded/README.md names); name -> folder.
COMMITTED_RESULTS = {p.name: p for root in ("reference", "superseded")
                     for p in sorted((ROOT / "results" / root).iterdir()) if p.is_dir()}

TINY_SYNTHETIC = ["dataset.num_nodes=400", "dataset.num_features=16", "dataset.num_communities=6",
                  "dataset.train_per_class=10", "dataset.num_val=40", "dataset.num_test=60"]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, scale: float | None = None) -> None:
    """Equal to 1e-9 relative to ``scale`` (default: the tensor's own largest value), both float64 (see
    test_exactness.py)."""
    assert actual.dtype == expected.dtype == torch.float64
    scale = expected.abs().max().item() if scale is None else scale
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-9 * scale)


def gradient_scale(grads: Iterable[torch.Tensor]) -> float:
    """The largest gradient of a model: the scale its gradients' rounding noise is relative to. A tensor
    whose own gradients are all ~1e-15 (a parameter that barely matters) is rounding noise on its own
    scale, and two correct runs may differ there by 100% (seen on another CPU: a relative difference of
    2e-8 on a 1e-15 gradient)."""
    return max(g.abs().max().item() for g in grads)


def assert_grads_close(grads: Sequence[torch.Tensor], expected: Sequence[torch.Tensor],
                       nonzero: bool = False) -> None:
    """Every gradient equal to 1e-9 relative to the model's largest gradient (:func:`gradient_scale`,
    which must not be 0); with ``nonzero`` every expected gradient must be non-zero."""
    assert len(grads) == len(expected) > 0
    scale = gradient_scale(expected)
    assert scale > 0
    for g, e in zip(grads, expected):
        assert not nonzero or e.abs().sum() > 0
        assert_close(g, e, scale)


def build_on(graph: Graph, groups: Sequence[str], keys: Mapping[str, Any]) -> Trainee:
    """``pipegnn.build`` over ``graph`` (the tests' random graphs, in float64), as a run builds its pieces:
    the config groups ``groups`` chosen (``framework=dgl``, ``engine=gpipe``; each combination composed
    once), then each of ``keys`` set (``{"chunks": 3, "model.hidden": 8}``), layer-wise evaluation off
    unless set (its caches would change the model's buffers)."""
    cfg = copy.deepcopy(_composed(tuple(groups)))
    for key, value in {"microbatch.evaluation": "plan", **keys}.items():
        OmegaConf.update(cfg, key, value, merge=False)
    return build(cfg, graph=graph)


@functools.lru_cache(maxsize=None)
def _composed(groups: tuple[str, ...]) -> DictConfig:
    return make_cfg(*groups)


def model_keys(model: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """A model config's keys (``dict(name="gat", hidden=4, ...)``) as :func:`build_on`'s group and keys."""
    return [f"model={model['name']}"], {f"model.{k}": v for k, v in model.items() if k != "name"}


def named_gradients(trainee: Trainee) -> dict[str, torch.Tensor | None]:
    """Every parameter's gradient of ``trainee``'s model, named as in the whole model: a pipeline rank's
    model holds only its stages' units, numbered from 0 (``own_stages``), named here by their places in
    the whole model (the engine's ``units`` of its ``local`` stages)."""
    engine = trainee.engine
    owned = [u for s in engine.local for u in engine.units[s]] if isinstance(engine, PipeliningEngine) \
        else list(range(len(trainee.model)))
    grads = {}
    for name, p in trainee.model.named_parameters():
        unit, rest = name.split(".", 1)
        grads[f"{owned[int(unit)]}.{rest}"] = p.grad
    return grads


def run_plan(framework: str, model: StagedGNN, keys: Mapping[str, Any], graph: Graph, chunks: int,
             engine: str, balance: list[int] | None = None,
             device: torch.device = torch.device("cpu")) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Training targets' logits (node order) and every gradient after one step of ``engine`` (single,
    or gpipe with ``balance``, in units: required) over exact micro-batches (METIS) on ``device`` (each
    stage's), returned
    on the CPU: the run's pieces built by ``pipegnn.build`` over ``graph`` with the model config ``keys``,
    given ``model``'s weights (``model`` is not trained)."""
    group, values = model_keys(keys)
    where = {"engine.device": str(device)} if engine == "single" else \
        {"engine.devices": [str(device)] * len(balance or []), "engine.balance": balance}
    trainee = build_on(graph, [f"framework={framework}", *group, f"engine={engine}"],
                       {**values, **where, "chunks": chunks, "microbatch.partition": "metis",
                        "microbatch.targets": "train", "microbatch.halo": "exact"})
    trainee.model.load_state_dict(model.state_dict())
    runner, ids, plan = trainee.engine, trainee.training.ids, trainee.training.plan
    out = runner.predict(ids)
    runner.train_step(ids, *trainee.train_labels())
    return out.cpu()[torch.argsort(plan.targets)], [p.grad.cpu() for p in trainee.model.parameters()]


def make_cfg(*overrides: str) -> DictConfig:
    """The real config composed with Hydra, shrunk to 3 epochs and (unless another dataset is chosen)
    a tiny synthetic graph."""
    other = any(o.startswith("dataset=") and o != "dataset=synthetic" for o in overrides)
    tiny = [] if other else TINY_SYNTHETIC
    return compose_config([*tiny, "train.epochs=3", *overrides])


def run_no_dropout(*overrides: str) -> dict:
    """``run`` of :func:`make_cfg`'s config with ``model.dropout=0`` and ``overrides`` (engines that
    train the same model then give the same losses)."""
    return run(make_cfg("model.dropout=0", *overrides))


def losses_no_dropout(*overrides: str) -> list[float]:
    """The per-epoch training losses of :func:`run_no_dropout`, which must complete."""
    record = run_no_dropout(*overrides)
    assert record["status"] == "completed", (record["error"], record.get("traceback"))
    return [e["train_loss"] for e in record["epochs"]]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def float64_rank(rank: int, world: int, port: int, framework: str) -> tuple:
    """A spawned test rank's setup: float64 default, one thread, the gloo group, and the float64 random
    graph with ``framework``'s adapter."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    graph = random_graph()
    graph.x = graph.x.double()
    return graph, get_backend(framework)


def pipeline_info(**kw) -> PipelineInfo:
    """Two stages (units ``a`` and ``b``) on two CPU lanes, GPipe's schedule over 4 micro-batches, ``kw``
    changed."""
    base = dict(engine="pipelining", schedule="gpipe", chunks=4, stage_units=[["a"], ["b"]], lanes=[0, 1],
                devices=["cpu", "cpu"], overlap_possible=True)
    return PipelineInfo(**{**base, **kw})


def damage_a_tensor(path: Path) -> None:
    """Invert 8 bytes in the middle of the largest tensor a ``torch.save`` file holds, in place: the size
    and the zip structure unchanged, so the file still loads (as a damaged disk or a stray write leaves
    it)."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    with open(path, "rb") as f:  # the member's data follows its local header (30 bytes + name + extra)
        f.seek(info.header_offset + 26)
        name, extra = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
    start = info.header_offset + 30 + name + extra + info.file_size // 2
    data[start:start + 8] = bytes(255 - b for b in data[start:start + 8])
    path.write_bytes(bytes(data))


# --- Dataset caches: crafted files and unwritable folders --------------------------------------------

FIELDS = ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")


class CodeMarker:
    """Unpickling it creates the folder ``path``: the proof that a load ran code from a file."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def plant_processed(folder: Path, marker: Path, names=("data.pt", "pre_transform.pt", "pre_filter.pt")):
    """Code-carrying files where PyG's (and ogb's) dataset classes look for their processed files."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        torch.save(CodeMarker(marker), folder / name)


def same_graph(a: Graph, b) -> bool:
    """Equal values, dtypes and shapes in every field (``b``: a Graph or PyG Data)."""
    return all(torch.equal(getattr(a, f), getattr(b, f)) and getattr(a, f).dtype == getattr(b, f).dtype
               for f in FIELDS)


def unwritable_cache(tmp_path: Path, how: str) -> Path:
    """A cache folder that cannot be created or written: under a regular file (fails even as root), or
    an existing folder with mode 0o555 (skipped as root, whom the mode does not stop)."""
    if how == "under_file":
        blocker = tmp_path / "blocker"
        blocker.write_text("a file, not a folder")
        return blocker / "cache"
    if os.geteuid() == 0:
        pytest.skip("root writes into a 0o555 folder; the under_file case covers root")
    cache = tmp_path / "readonly"
    cache.mkdir()
    cache.chmod(0o555)
    return cache


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``experiments/train.py`` with ``args`` in ``cwd`` (its own cache, one thread), output captured."""
    env = {**os.environ, "PIPEGNN_CACHE": str(cwd / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# --- Result records: hand-made ones, sweeps left on disk, the results command line ----------------------

#: The config of :data:`COMPLETED_RECORD`: GAT on Cora, GPipe on two GPUs.
RECORD_CONFIG = {"chunks": 8, "microbatch": {"halo": "exact", "partition": "metis", "seed": 0},
                 "train": {"epochs": 3, "lr": 0.005, "weight_decay": 0.0005, "seed": 1},
                 "data": {"root": None, "cache": ".cache"},
                 "dataset": {"name": "cora"}, "model": {"name": "gat", "hidden": 8, "layers": 2},
                 "framework": {"name": "pyg"},
                 "engine": {"name": "gpipe", "devices": ["cuda:0", "cuda:1"], "balance": [1, 1],
                            "checkpoint": "except_last"}}

#: A completed record with every section but ``pipeline`` (as written before stage timelines).
COMPLETED_RECORD = {
    "status": "completed", "error": None, "config": RECORD_CONFIG,
    "choices": {"dataset": "cora", "model": "gat", "framework": "pyg", "engine": "gpipe",
                "hydra/launcher": "basic"},
    "env": {"git_sha": "abc123"}, "dataset": {"name": "cora", "num_nodes": 2708, "num_edges": 10556},
    "epochs": [{"epoch": i, "train_acc": 0.9, "val_acc": 0.78, "test_acc": 0.8} for i in range(3)],
    "final": {"train_acc": 1.0, "val_acc": 0.79, "test_acc": 0.815, "best_val_acc": 0.8,
              "test_acc_at_best_val": 0.82, "best_epoch": 1},
    "timing": {"setup_s": 1.5, "microbatch_build_s": 0.25, "epoch_time_median_s": 0.0125,
               "eval_time_median_s": 0.004, "total_s": 9.0},
    "memory": {"peak_rss_bytes": 300 * 2 ** 20,
               "peak_device_bytes": {"cuda:0": 64 * 2 ** 20, "cuda:1": 96 * 2 ** 20}},
    "microbatch": {"chunks": 8, "halo": "exact", "partition": "metis", "replication": 1.5,
                   "inflation": 2.25, "cut_edge_fraction": 0.1, "padding_fraction": 0.05,
                   "node_balance": 1.2, "eval": {"replication": 9.0}},
}


def failed_record() -> dict:
    """A failed run (the single engine, chunks=4, hidden 16), with a two-line error."""
    cfg = copy.deepcopy(RECORD_CONFIG)
    cfg.update(chunks=4, engine={"name": "single", "device": "cpu"})
    cfg["model"]["hidden"] = 16
    return {"status": "failed", "error": "RuntimeError: boom\nsecond line", "config": cfg,
            "traceback": "Traceback (most recent call last):\n  ...", "choices": {}, "env": {},
            "epochs": [{"epoch": 0}], "final": {}, "timing": {"total_s": 2.0},
            "memory": {"peak_rss_bytes": 2 ** 20, "peak_device_bytes": {}}, "microbatch": {}}


def invalid_record() -> dict:
    """An invalid run (chunks=0), stopped before training."""
    cfg = copy.deepcopy(RECORD_CONFIG)
    cfg["chunks"] = 0
    return {"status": "invalid", "error": "chunks must be an integer >= 1, got 0", "config": cfg,
            "choices": {"engine": "gpipe"}, "env": {}, "epochs": [], "final": {}, "timing": {"total_s": 0.5},
            "memory": {"peak_rss_bytes": None, "peak_device_bytes": {}}, "microbatch": {}}


def seeded_record(seed: int, test: float, val: float, chunks: int = 8, **env: Any) -> dict:
    """:data:`COMPLETED_RECORD` with its seed, chunks, accuracies, parameters and environment set."""
    record = copy.deepcopy(COMPLETED_RECORD)
    record["config"]["train"] = {"seed": seed}
    record["config"]["chunks"] = chunks
    record["final"].update(test_acc_at_best_val=test, best_val_acc=val)
    record["model"] = {"parameters": 92373}
    record["env"] = {"git_sha": "abc", "cpu": "Some CPU", "gpus": [],
                     "date": f"2026-11-2{seed}T10:00:00+00:00", **env}
    return record


def _hydra_job(job: Path, num: int, overrides: list[str], config: dict, choices: dict) -> None:
    """A job folder as Hydra leaves it when the job starts (before the run writes its record)."""
    (job / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), job / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides), job / ".hydra" / "overrides.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": {"job": {"num": num}, "runtime": {"choices": choices}}}),
                   job / ".hydra" / "hydra.yaml")


def killed_model_sweep(root: Path, planned: bool = True) -> Path:
    """A sweep of 4 jobs (chunks=2,8 from the sweeper's params x model=gat,gcn on the command line),
    killed during job 1: jobs 0 and 2 wrote their records, job 1 started (``.hydra/``) but has none, job 3
    never started (no folder). With ``planned``, the ``multirun.yaml`` the basic sweeper writes first."""
    jobs = [["chunks=2", "model=gat"], ["chunks=2", "model=gcn"], ["chunks=8", "model=gat"]]
    for num, overrides in enumerate(jobs):
        chunks, model = int(overrides[0].split("=")[1]), overrides[1].split("=")[1]
        config = {**copy.deepcopy(RECORD_CONFIG), "chunks": chunks}
        config["model"]["name"] = model
        choices = {**COMPLETED_RECORD["choices"], "model": model}
        _hydra_job(root / str(num), num, overrides, config, choices)
        if num != 1:
            write_record(root / str(num), {**COMPLETED_RECORD, "config": config, "choices": choices})
    if planned:
        root.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create({
            "hydra": {"sweep": {"dir": str(root), "subdir": "${hydra.job.num}"},
                      "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                                  "max_batch_size": None, "params": {"chunks": "2,8"}},
                      "overrides": {"hydra": [f"hydra.sweep.dir={root}"], "task": ["model=gat,gcn"]},
                      "job": {"num": "???"},
                      "runtime": {"choices": {"dataset": "cora", "model": "gat", "framework": "pyg",
                                              "engine": "gpipe", "hydra/launcher": "basic"}}},
            **RECORD_CONFIG}), root / "multirun.yaml")
    return root


def killed_variant_sweep(sweep: Path) -> Path:
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
        "runtime": {"choices": {"dataset": "synthetic", "hydra/launcher": "basic"}}}}),
        sweep / "multirun.yaml")
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


def results_cli(*args: object) -> subprocess.CompletedProcess:
    """``python -m pipegnn.results`` with ``args``, output captured."""
    return subprocess.run([sys.executable, "-m", "pipegnn.results", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


# --- Result records made to order, for statistics and figures -------------------------------------------

_RECORD_DEVICES = {"cpu2": ("gpipe", ["cpu", "cpu"]), "cpu": ("single", "cpu"), "gpu": ("single", "cuda:0"),
                   "gpu2": ("gpipe", ["cuda:0", "cuda:1"])}


def make_record(*, status: str = "completed", dataset: str = "cora", num_nodes: int = 2708,
                model: str = "gat", framework: str = "pyg", devices: str = "cpu2", chunks: int = 1,
                halo: str = "exact", partition: str = "metis", seed: int = 0, hidden: int = 8,
                targets: str | None = None, **values: float) -> dict[str, Any]:
    """A hand-made record shaped like pipegnn.training.launch's; ``values`` fill
    final/timing/memory/microbatch (``targets``: microbatch.targets, left out when None)."""
    engine, dev = _RECORD_DEVICES[devices]
    engine_cfg = {"name": engine, **({"devices": dev} if engine == "gpipe" else {"device": dev})}
    final = {k: values[k] for k in ("test_acc", "val_acc", "test_acc_at_best_val", "best_val_acc")
             if k in values}
    if "tta_train_s" in values:
        final["time_to_accuracy"] = {"train_s": values["tta_train_s"], "epoch": 3, "target_val_acc": 0.7}
    timing = {k: values[k] for k in ("epoch_time_median_s",) if k in values}
    memory = {"peak_rss_bytes": values["rss_mb"] * 2 ** 20 if "rss_mb" in values else None,
              "peak_device_bytes": {"cuda:0": values["device_mb"] * 2 ** 20} if "device_mb" in values else {}}
    mb = {k: values[k] for k in ("inflation", "replication") if k in values}
    done = status == "completed"
    return {"status": status, "error": None if done else "RuntimeError: boom",
            "config": {"chunks": chunks, "microbatch": {"halo": halo, "partition": partition,
                                                        **({"targets": targets} if targets else {})},
                       "train": {"seed": seed}, "dataset": {"name": dataset},
                       "model": {"name": model, "hidden": hidden, "layers": 2},
                       "framework": {"name": framework}, "engine": engine_cfg},
            "choices": {}, "dataset": {"num_nodes": num_nodes}, "final": final if done else {},
            "timing": timing if done else {}, "memory": memory, "microbatch": mb if done else {}}


def make_frame(*records: dict[str, Any], index: list[int] | None = None) -> pd.DataFrame:
    """The runs table of ``records`` (as :func:`pipegnn.results.load` makes it from files)."""
    return pd.DataFrame([flatten(r) for r in records], index=index)


def legend_texts(ax) -> list[str]:
    """The labels of ``ax``'s legend."""
    return [t.get_text() for t in ax.get_legend().get_texts()]
