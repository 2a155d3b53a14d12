"""One process's part of a run: load the graph, build the plans and the staged model, build the engine
(this process's rank of a pipeline: [`build_trainee`][pipegnn.training.rank.build_trainee]), train through
the epoch loop ([`pipegnn.training.epochs`][pipegnn.training.epochs]), filling the run's record."""
from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from pipegnn.backends import get_backend
from pipegnn.config.choices import EdgeStorage, EngineName, FirstTransform, Halo, Storage, Targets
from pipegnn.config.schema import Config, EngineConfig, PipeliningEngineConfig, StagedEngineConfig
from pipegnn.data import Graph, load_graph, split_summary, stored
from pipegnn.data.features import DiskFeatureStore, FeatureRows, partition_ordered
from pipegnn.data.graph_store import cached_graph_store, csc
from pipegnn.engines import AUTO, build_engine
from pipegnn.errors import ConfigError
from pipegnn.measure import (
    address_space_bytes,
    memory_limit,
    peak_rss_bytes,
    reset_peaks,
    timed,
)
from pipegnn.microbatch import (
    ComputationGraph,
    MicroBatchPlan,
    NeighbourSampler,
    PlanSpec,
    build_plan,
    cached_plan,
)
from pipegnn.microbatch.halo import InCSR
from pipegnn.models import build_model, model_stack
from pipegnn.models.precision import autocast_dtype, dtype_name
from pipegnn.run_record import RunRecord
from pipegnn.sparse import is_csr
from pipegnn.timeline import PipelineInfo
from pipegnn.training.checkpoints import checkpoint_path
from pipegnn.training.epochs import RUN_LOG, Pass, Trainee, fit
from pipegnn.training.targets import check_targets, eval_targets, layerwise

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(RUN_LOG)


def train_rank(cfg: Config, record: RunRecord,
               on_epoch: Callable[[dict[str, Any]], Any] | None = None,
               state_dir: str | Path | None = None) -> list[torch.device]:
    """This process's part of the run (every part of it but a pipeline's other ranks), filling
    ``record``; returns the devices it trained on."""
    trainee = build_trainee(cfg, record)
    model, engine, eval_ids = trainee.model, trainee.engine, trainee.evaluation.ids
    with memory_limit(_stage_limit(cfg.engine, record)):  # engine.memory_limit_gb: a device's memory
        if cfg.microbatch.halo is Halo.historical:
            model.eval()
            with timed(engine.devices) as fill:
                engine.refresh(model, eval_ids)
            record.timing["history_fill_s"] = fill.seconds
        rank = dist.get_rank() if dist.is_initialized() else 0
        fit(cfg, trainee, record, on_epoch, None if state_dir is None else checkpoint_path(state_dir, rank))
    return engine.devices


def build_trainee(cfg: Config, record: RunRecord, given: Graph | None = None) -> Trainee:
    """This process's pieces of the run of the checked config ``cfg``: the graph (loaded, or ``given``,
    kept as ``data.features`` and ``data.edges`` say; its targets checked), the training and evaluation
    plans (and the sampler of sampled halos), the staged model with them attached, and the engine (this
    process's rank of a pipeline); ``record`` gets what setting them up measured (the dataset's, the
    model's, the plans' and the features' sections, set-up times and peak memory).
    [`pipegnn.build`][pipegnn.training.launch.build] checks a config and calls it."""
    mb, storage, precision = cfg.microbatch, cfg.data.features, cfg.train.precision
    torch.manual_seed(cfg.train.seed)
    with timed() as loading:  # a synthetic graph is generated here (with disk: its feature file)
        reads = storage in (Storage.memory, Storage.sparse) or _reads_features(cfg)
        kept = storage if reads else "none"
        graph = stored(given, cfg.data.cache, kept, cfg.data.edges) if given is not None else \
            load_graph(cfg.dataset, cfg.data.root, cfg.data.cache, features=kept, edges=cfg.data.edges)
    check_targets(cfg, graph)
    low = autocast_dtype(precision)
    if low is not None and graph.x is not None:  # bf16: the features are kept in bfloat16 (one copy,
        graph = dataclasses.replace(graph, x=graph.x.to(low))  # shared with the model; on disk: below)
    backend = get_backend(cfg.framework.name)
    halo, by_layer = mb.halo, layerwise(mb.halo, mb.evaluation)
    # The plans before the model (they use no random numbers): a plan too large for the machine is refused
    # in seconds, before a deep model's minutes of building.
    with timed() as build:
        computation, edges = _computation_graph(cfg, graph, backend)
        if computation.csr is not None:  # the plans read the graph store: let the edge list go first
            graph = dataclasses.replace(graph, edge_index=torch.empty(2, 0, dtype=torch.long))
        (train_plan, train_cached), (eval_plan, eval_cached), sampler = _build_plans(
            cfg, graph, computation, len(model_stack(cfg.model, 1, 1).layers))
    with timed() as modelling:
        model = build_model(cfg.model, backend, graph.feature_source, graph.num_classes,
                            history=by_layer, first_transform=mb.first_transform,
                            precision=precision, halo_dropout=mb.halo_dropout,
                            refresh_only=halo is not Halo.historical)
    record.dataset = {"name": graph.name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
                         "num_features": graph.num_features, "num_classes": graph.num_classes,
                         "feature_dtype": dtype_name(model.feature_dtype),
                         "feature_bytes": _feature_bytes(graph, model.feature_dtype),
                         **split_summary(cfg.dataset, graph), "edges": edges}
    record.model = {"parameters": sum(p.numel() for p in model.parameters())}
    log.info("%s; %s with %d parameters", graph, cfg.model.name, record.model["parameters"])
    # Training reads the plans, the features (held by the model), the labels and the masks: let the
    # graph's edge list go, which on large graphs is a good share of what stays resident.
    graph = dataclasses.replace(graph, edge_index=torch.empty(2, 0, dtype=torch.long))
    store, features = _feature_rows(model, graph, storage, train_plan.part)
    order_s = features.pop("order_s", 0.0)
    record.features = features
    record.microbatch = {**_plan_summary(train_plan, eval_plan, mb.first_transform), "targets": mb.targets,
                            "cached": train_cached, "eval_cached": eval_cached,
                            "evaluation": "layerwise" if by_layer else "plan",
                            "eval_halo": eval_plan.halo}
    if sampler is not None:  # the draws: epoch e's from (seed, e, micro-batch); the plan's statistics are
        record.microbatch.update(fanouts=sampler.fanouts, sample_seed=sampler.seed)  # epoch 0's
    log.info("micro-batches: %d x halo=%s partition=%s targets=%s, replication %.2f, inflation %.2f "
             "(first transform %s), cut edges %.1f%% (%s in %.2fs)", train_plan.chunks, halo,
             train_plan.partition, mb.targets, train_plan.stats.replication,
             record.microbatch["inflation"], mb.first_transform, 100 * train_plan.stats.cut_edge_fraction,
             "cached" if train_cached else "built", build.seconds)

    if halo is Halo.historical and mb.targets is Targets.train and train_plan.chunks > 1:
        deep = (" and about ten points on a 64-layer GCNII (test accuracy 73.3 and 74.0 against 84.2 and 83.9"
                " at full batch)" if model.num_layers > 2 else "")
        log.warning("historical halos with microbatch.targets=train: each micro-batch computes only its "
                    "training nodes, and every neighbour's deeper rows come from the caches (written by the "
                    "last evaluation, no gradient through them); microbatch.targets=all (the default with "
                    "historical halos) computes every node of a part, as GNNAutoScale does: 2.3-3.0 points "
                    "more on Cora's 2-layer GAT (results/reference/historical_gap)%s", deep)
    train_ids = model.attach(train_plan)
    eval_ids = train_ids if eval_plan is train_plan else model.attach(eval_plan)
    if halo is Halo.historical and isinstance(cfg.engine, StagedEngineConfig) and cfg.engine.balance == AUTO:
        model.eval()
        model.refresh(eval_ids)  # timing the units for balance=auto reads the history caches
    engine = build_engine(cfg.engine, model, train_ids)
    _log_pipeline(engine.info)
    if sampler is not None:  # later epochs are drawn where the blocks are used (a graph store's stay here)
        sampler = sampler.to(engine.input_device)
        record.microbatch.update(sample_stream=sampler.stream.as_dict(), draw_ahead=mb.draw_ahead)
    record.memory["setup_peak_rss_bytes"] = peak_rss_bytes()  # loading, plans, model and engine
    reset_peaks(engine.devices)
    record.timing.update(setup_s=loading.seconds + modelling.seconds, load_s=loading.seconds,
                         microbatch_build_s=build.seconds, features_order_s=order_s)
    return Trainee(graph, model, engine, Pass(train_plan, train_ids), Pass(eval_plan, eval_ids), store,
                   sampler)


def _stage_limit(engine: EngineConfig, record: RunRecord) -> int | None:
    """The address-space cap of this stage process while it trains (``engine.memory_limit_gb`` above
    what it holds once set up, as a device of that size would allow; None: no cap)."""
    gb = engine.memory_limit_gb if isinstance(engine, PipeliningEngineConfig) else None
    if gb is None:
        return None
    base = address_space_bytes() or 0
    record.memory["stage_limit_bytes"] = int(gb * 2**30)
    return base + int(gb * 2**30)


def _reads_features(cfg: Config) -> bool:
    """Whether this process runs the first layer's transform, which reads the features: every process
    but a pipeline rank other than 0 (stage 0 runs on rank 0)."""
    return cfg.engine.name is not EngineName.pipelining or dist.get_rank() == 0


def _feature_bytes(graph: Graph, dtype: torch.dtype) -> int:
    """What the features take: a CSR matrix's arrays, else the dense matrix's."""
    if is_csr(graph.x):
        assert graph.x is not None
        return sum(t.numel() * t.element_size()
                   for t in (graph.x.crow_indices(), graph.x.col_indices(), graph.x.values()))
    return graph.num_nodes * graph.num_features * dtype.itemsize


def _feature_rows(model: Any, graph: Graph, storage: Storage,
                  part: Tensor) -> tuple[DiskFeatureStore | None, dict[str, Any]]:
    """With features on disk and read by this process: give the model's first unit the rows of a copy
    ordered by the training partition (written once, cached), and return its store. Also the record's
    ``features`` section (storage; on disk: file, its bytes, row order, whether cached)."""
    dtype = model.feature_dtype
    info: dict[str, Any] = {"storage": storage}  # dtype and bytes: the record's dataset section
    if graph.x is not None:  # in memory
        return None, info
    assert graph.features is not None  # features not in memory are described
    if graph.features.folder is None:  # never read here
        return None, info
    source = DiskFeatureStore(graph.features.folder)
    with timed() as ordering:
        store, cached = partition_ordered(source, part, dtype)
    model.set_features(FeatureRows(store))
    path = store.file()
    info.update(path=str(path), file_bytes=path.stat().st_size, source_path=str(source.file()),
                order="node" if store is source else "partition", cached=cached, order_s=ordering.seconds)
    log.info("features on disk: %s (%.1f MiB, %s, rows in %s order, %s in %.2fs)", path,
             info["file_bytes"] / 2**20, dtype_name(dtype), info["order"], "cached" if cached else "written",
             ordering.seconds)
    return store, info


def _computation_graph(cfg: Config, graph: Graph, backend: Any) -> tuple[ComputationGraph, dict[str, Any]]:
    """The edges the model's layers read (self-loops, GCN weights), and the record's ``dataset.edges``.

    With ``data.edges=disk`` they are a graph store's
    ([`pipegnn.data.graph_store`][pipegnn.data.graph_store]): CSC files in the graph's edge folder
    (``graph.edges``), keyed by its edges, the framework, the model and the dtype, written once and reused
    while they match their checksums; the plans read them by position. A synthetic graph loaded without its
    edge list (drawn before) is generated again to build a store it does not have yet.

    Raises:
        ConfigError: the graph store cannot be written.
    """
    dtype = torch.promote_types(graph.feature_dtype, torch.float32)
    if cfg.data.edges is EdgeStorage.memory:
        edge_index, edge_weight = backend.computation_graph(cfg.model.name, graph.edge_index, graph.num_nodes,
                                                            dtype)
        return ComputationGraph(edge_index, graph.num_nodes, edge_weight), {"storage": "memory"}

    meta = graph.edges
    assert meta is not None  # load_graph describes the edges with data.edges=disk

    def grouped() -> tuple[Tensor, Tensor, Tensor | None]:
        edges = graph.edge_index
        if edges.size(1) != meta.num_edges:  # not loaded: draw them again
            edges = load_graph(cfg.dataset, cfg.data.root, cfg.data.cache, features="none").edge_index
        edge_index, edge_weight = backend.computation_graph(cfg.model.name, edges, graph.num_nodes, dtype)
        return csc(edge_index, graph.num_nodes, edge_weight)

    computation = f"{cfg.framework.name}-{cfg.model.name}-{str(dtype).removeprefix('torch.')}"
    key = hashlib.sha1(f"{meta.key}-{graph.num_nodes}-{computation}".encode()).hexdigest()[:24]
    edge_type, folder = ("node", computation, "node"), meta.folder
    try:
        store, cached = cached_graph_store(folder, edge_type, key, grouped)
    except OSError as e:
        raise ConfigError(f"data.edges=disk: the edge files cannot be written under {folder} ({e}); make "
                          "data.cache writable or use data.edges=memory") from e
    colptr, row, weight = store.columns(edge_type)
    paths = store.paths(edge_type)
    info: dict[str, Any] = {"storage": "disk", "path": str(folder), "cached": cached,
                            "edge_list_loaded": graph.edge_index.size(1) == meta.num_edges,
                            "computation_edges": row.numel(),
                            "file_bytes": sum(p.stat().st_size for p in paths.values() if p.is_file())}
    log.info("edges on disk: %s (%d edges, %.1f MiB, %s)", folder, row.numel(), info["file_bytes"] / 2**20,
             "cached" if cached else "written")
    csr = InCSR.from_columns(colptr, row, weight, key)
    return ComputationGraph(torch.empty(2, 0, dtype=torch.long), graph.num_nodes, csr=csr), info


def _build_plans(cfg: Config, graph: Graph, computation: ComputationGraph, num_layers: int) -> tuple[
        tuple[MicroBatchPlan, bool], tuple[MicroBatchPlan, bool], NeighbourSampler | None]:
    """The training and evaluation plans, each with whether it came from the cache, and with sampled
    halos the sampler of the training plan's later epochs (else None).

    The evaluation plan is the training plan when both have the same nodes and halos (historical halos
    with targets=all), and otherwise reuses the training partition when the training targets cover the
    evaluation nodes (targets=all): one partitioner run instead of two. Sampled halos evaluate with
    exact ones (full neighbourhoods, as the sampled-training literature evaluates);
    ``microbatch.evaluation=layerwise`` evaluates every node with historical ones, layer by layer.
    """
    mb = cfg.microbatch
    sampled = mb.halo is Halo.sampled

    def plan(targets: Tensor, part: Tensor | None = None,
             halo: Halo = mb.halo) -> tuple[MicroBatchPlan, bool]:
        return cached_plan(mb.cache, computation, targets,
                           PlanSpec(cfg.chunks, num_layers, halo=halo, partitioner=mb.partition,
                                    seed=mb.seed), part)

    train_targets, evaluated = graph.split(mb.targets), eval_targets(graph, mb.halo, mb.evaluation)
    sampler = None
    if sampled:
        assert mb.fanouts is not None  # check_config
        # kept by the sampler for every epoch's draw
        csr = computation.csr or InCSR(computation.edge_index, graph.num_nodes, computation.edge_weight)
        spec = PlanSpec(cfg.chunks, num_layers, halo=Halo.sampled, partitioner=mb.partition, seed=mb.seed,
                        fanouts=tuple(mb.fanouts))
        train = build_plan(computation, train_targets, spec, csr=csr), False
        parts = [m.targets for m in train[0].micro_batches]
        sampler = NeighbourSampler(csr, parts, list(mb.fanouts), mb.seed)
    else:
        train = plan(train_targets)
    halo = Halo.historical if layerwise(mb.halo, mb.evaluation) else Halo.exact if sampled else mb.halo
    if torch.equal(evaluated, train_targets) and halo is mb.halo:
        return train, train, sampler
    if bool(torch.isin(evaluated, train_targets).all()):
        return train, plan(evaluated, train[0].part, halo), sampler
    return train, plan(evaluated, halo=halo), sampler


def _log_pipeline(info: PipelineInfo) -> None:
    stages = " | ".join(" ".join(units) for units in info.stage_units)
    log.info("pipeline: %s, schedule %s, %d stage(s) [%s] (balance: %s), theoretical bubble %.1f%%",
             info.engine, info.schedule, info.num_stages, stages, info.balance_source,
             100 * info.as_dict()["bubble_theoretical"])
    if info.num_stages > 1 and not info.overlap_possible:
        log.warning("pipeline stages cannot overlap: %s", info.overlap_note)


def _plan_summary(train_plan: MicroBatchPlan, eval_plan: MicroBatchPlan,
                  first: FirstTransform) -> dict[str, Any]:
    """The plans' statistics; ``inflation`` and ``work`` count what ``first`` (the first transform's
    mode) computes."""
    def summary(plan: MicroBatchPlan) -> dict[str, Any]:
        work = plan.stats.work(first)
        return {**plan.stats.as_dict(), "inflation": work["inflation"], "work": work}

    return {"chunks": train_plan.chunks, "halo": train_plan.halo, "partition": train_plan.partition,
            **summary(train_plan), "eval": summary(eval_plan)}
