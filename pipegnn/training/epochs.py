"""The epoch loop of one run: a training step, an evaluation (a refresh of the history caches with
historical halos), the epoch's record entry and log line, early stopping, checkpoints; then the run's
final figures ([`pipegnn.training.run_figures`][pipegnn.training.run_figures])."""
from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from pipegnn.config.choices import Capture, Halo, Monitor
from pipegnn.config.schema import Config, TrainConfig
from pipegnn.data import Graph
from pipegnn.data.features import DiskFeatureStore
from pipegnn.engines import IGNORE, Engine, Replayed
from pipegnn.measure import timed
from pipegnn.microbatch import MicroBatchPlan, NeighbourSampler
from pipegnn.microbatch.draw_ahead import DrawAhead
from pipegnn.microbatch.traffic import epoch_figures, stage_medians
from pipegnn.models import StagedGNN
from pipegnn.run_record import RunRecord
from pipegnn.timeline import chrome_trace, medians, step_figures
from pipegnn.training.checkpoints import save, training_state
from pipegnn.training.preemption import signals_deferred
from pipegnn.training.resume import resume_from
from pipegnn.training.run_figures import best_epoch, final_figures, stops

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: The run's log: launch, rank and epochs log under one name, which train.log's lines keep.
RUN_LOG = "pipegnn.train"
log = logging.getLogger(RUN_LOG)
#: ``extra`` of the per-epoch log line, so that handlers can tell it apart (``sweep.EpochProgress``).
EPOCH_LINE = {"pipegnn_epoch": True}


@dataclass(frozen=True)
class Pass:
    """The micro-batches of one kind of pass over the graph (a training step, an evaluation): their
    plan and the ids the engine takes for them ([`attach`][pipegnn.models.base.StagedGNN.attach])."""

    plan: MicroBatchPlan
    ids: Tensor


@dataclass(frozen=True)
class Trainee:
    """What one process trains: the graph (its labels and masks), the staged model and the engine that
    runs it, the training and the evaluation pass, and the feature file the first unit reads (None:
    the features are in memory), and with sampled halos the sampler that draws each epoch's training
    micro-batches (the plan holds epoch 0's)."""

    graph: Graph
    model: StagedGNN
    engine: Engine
    training: Pass
    evaluation: Pass
    store: DiskFeatureStore | None = None
    sampler: NeighbourSampler | None = None

    def train_labels(self) -> tuple[Tensor, int]:
        """The training pass's targets' labels on the engine's output device, `IGNORE` for targets
        outside the training split (``targets=all`` computes them, the loss leaves them out), and how many
        are labelled: what ``engine.train_step(training.ids, *train_labels())`` takes."""
        targets, mask = self.training.plan.targets, self.graph.train_mask
        labels = torch.where(mask[targets], self.graph.y[targets], IGNORE).to(self.engine.output_device)
        return labels, int(mask[targets].sum())


def fit(cfg: Config, trainee: Trainee, record: RunRecord,
        on_epoch: Callable[[dict[str, Any]], Any] | None = None, state_path: Path | None = None) -> None:
    """Train ``trainee`` for ``train.epochs`` (or until ``train.patience`` epochs pass without a better
    ``train.monitor``), filling ``record``'s ``epochs``, ``final``, timing medians and ``pipeline``
    figures; with ``state_path``, resume from the checkpoint there (``resume=true``) and save one every
    ``train.checkpoint_every``."""
    loop = _Loop(cfg, trainee, record, on_epoch, state_path)  # the optimizer; a checkpoint's epochs back
    try:
        for epoch in range(loop.start, cfg.train.epochs):
            step = loop.train(epoch)  # this epoch's draw (sampled halos), forward, backward, optimizer
            evaluation = loop.evaluate()  # every node's outputs (historical halos: the caches refreshed)
            loop.keep(epoch, step, evaluation)  # the epoch's entry, trace, log line; on_epoch
            loop.checkpoint(epoch)  # every train.checkpoint_every epochs
            if loop.stops():  # train.patience epochs without a better train.monitor
                break
    finally:
        loop.close()
    loop.summarise()  # the run's final figures and medians


@dataclass
class _Step:
    """One epoch's training step as measured: its loss and time, the draw's figures (sampled halos), the
    engine's boxes (a timeline), the caches' figures (historical halos), feature file reads (before the
    step, after it)."""

    loss: float
    seconds: float
    drawn: dict[str, Any]
    boxes: Any
    history: Any
    reads: tuple[dict[str, int], dict[str, int]] | None


class _Loop:
    """What the epochs of one run share, set up once (optimizer, labels and masks on the output device, a
    checkpoint's epochs, the captured step, the draw ahead), and the parts of an epoch, in the order
    [`fit`][pipegnn.training.epochs.fit] calls them."""

    def __init__(self, cfg: Config, trainee: Trainee, record: RunRecord,
                 on_epoch: Callable[[dict[str, Any]], Any] | None, state_path: Path | None) -> None:
        self.cfg, self.trainee, self.record, self.on_epoch, self.state_path = \
            cfg, trainee, record, on_epoch, state_path
        graph, model, engine = trainee.graph, trainee.model, trainee.engine
        train_plan, eval_plan = trainee.training.plan, trainee.evaluation.plan
        train_cfg = cfg.train
        captured = cfg.engine.capture is Capture.cuda_graph
        self.optimizer = _optimizer(model, train_cfg, capturable=captured)
        epochs = record.epochs
        if cfg.resume and state_path is not None:
            restored = resume_from(cfg, state_path, model, self.optimizer)
            epochs.extend(restored.epochs)
            if epochs:
                record.resumed = {"checkpoint": str(restored.file), "epochs_restored": len(epochs)}
                record.trace = restored.trace
            if on_epoch is not None:  # a spawned pipeline's launcher keeps them (and its deadlines move)
                for entry in epochs:
                    on_epoch(entry)
        self.out = out = engine.output_device
        self.train_labels, self.num_labelled = trainee.train_labels()
        self.historical = train_plan.halo == Halo.historical
        self.eval_labels = graph.y[eval_plan.targets].to(out)
        self.masks = {s: getattr(graph, f"{s}_mask")[eval_plan.targets].to(out)
                      for s in ("train", "val", "test")}
        trace_epoch = cfg.engine.trace_epoch
        if trace_epoch is not None:
            trace_epoch = min(trace_epoch, train_cfg.epochs - 1)
        self.patience, self.monitor = train_cfg.patience, train_cfg.monitor
        self.replayed = (Replayed(engine, self.optimizer, trainee.training.ids, self.train_labels,
                                  self.num_labelled, trainee.evaluation.ids) if captured else None)
        # A resumed run that had stopped early trains no further (its checkpoint holds the stopping epoch).
        self.start = (train_cfg.epochs if epochs and stops(epochs, self.patience, self.monitor)
                      else len(epochs))
        if trace_epoch is not None and trace_epoch < self.start < train_cfg.epochs and record.trace is None:
            log.info("resume: the checkpoint holds no trace of epoch %d; tracing epoch %d", trace_epoch,
                     self.start)
            trace_epoch = self.start  # (an older version's checkpoint, or one saved before the traced epoch)
        self.trace_epoch = trace_epoch
        if self.start > len(epochs):
            log.info("resume: the checkpoint's run stopped early after epoch %d (train.patience=%s); nothing "
                     "to train", epochs[-1]["epoch"], self.patience)
        self.drawing = (None if trainee.sampler is None
                        else DrawAhead(trainee.sampler, cfg.microbatch.draw_ahead))

    def train(self, epoch: int) -> _Step:
        """Epoch ``epoch``'s training step."""
        model, engine, store, optimizer = (self.trainee.model, self.trainee.engine, self.trainee.store,
                                           self.optimizer)
        model.train()
        if optimizer is not None and self.replayed is None:
            optimizer.zero_grad(set_to_none=True)
        before = store.read_stats() if store is not None else None  # feature file reads so far
        with timed(engine.devices) as step:
            # sampled halos: this epoch's neighbourhoods (what is left of their draw is part of the step)
            drawn = _draw(self.trainee, self.drawing, epoch, self.cfg.train.epochs)
            model.tick()  # a new step for the caches (ages count steps; per-node masks drawn anew)
            if self.replayed is not None:  # the optimizer's step is part of the recorded step
                loss = self.replayed.train_step()
            else:
                loss = engine.train_step(self.trainee.training.ids, self.train_labels, self.num_labelled)
                if optimizer is not None:
                    optimizer.step()
        boxes = engine.step_boxes()
        history = engine.history_per_stage(model) if self.historical else None
        reads = None if store is None or before is None else (before, store.read_stats())
        if not math.isfinite(loss):
            raise FloatingPointError(f"training loss is {loss} at epoch {epoch}")
        return _Step(loss, step.seconds, drawn, boxes, history, reads)

    def evaluate(self) -> dict[str, Any]:
        """The accuracies, the validation loss and the evaluation's time."""
        model, engine = self.trainee.model, self.trainee.engine
        eval_ids = self.trainee.evaluation.ids
        model.eval()
        with timed(engine.devices) as evaluation:
            # Layer-wise evaluation (historical halos: which also refreshes every cached row).
            if self.trainee.evaluation.plan.halo == Halo.historical:
                logits = engine.refresh(model, eval_ids)
            else:
                logits = engine.predict(eval_ids) if self.replayed is None else self.replayed.predict()
            logits = logits.to(self.out)
            correct = logits.argmax(1) == self.eval_labels
        masks = self.masks
        acc = {f"{s}_acc": float(correct[m].float().mean()) for s, m in masks.items()}
        val_loss = float(F.cross_entropy(logits[masks["val"]].float(), self.eval_labels[masks["val"]]))
        return {**acc, "val_loss": val_loss, "eval_time_s": evaluation.seconds}

    def keep(self, epoch: int, step: _Step, evaluation: dict[str, Any]) -> None:
        """Epoch ``epoch``'s entry in the record (with its trace, when it is the traced epoch), given to
        ``on_epoch`` and logged."""
        record, engine, store = self.record, self.trainee.engine, self.trainee.store
        acc = {k: v for k, v in evaluation.items() if k.endswith("_acc")}
        record.epochs.append({"epoch": epoch, "train_loss": step.loss, **acc,
                              "val_loss": evaluation["val_loss"], "epoch_time_s": step.seconds,
                              "eval_time_s": evaluation["eval_time_s"],
                              **(epoch_figures(step.history) if step.history is not None else {}),
                              **step.drawn, "ended_at": time.time()})  # wall clock, for the run's wall_times
        entry = record.epochs[-1]
        if store is not None:
            assert step.reads is not None  # read from the store
            entry["feature_reads"] = _feature_reads(*step.reads, store.read_stats())
        if step.boxes is not None:
            entry["pipeline"] = step_figures(step.boxes, engine.info)
            if epoch == self.trace_epoch:
                record.trace = chrome_trace(step.boxes, engine.info, epoch)
        if self.on_epoch is not None:
            self.on_epoch(entry)
        log.info("epoch %3d  loss %.4f  train %.3f  val %.3f (loss %.4f)  test %.3f  epoch %.3fs  "
                 "eval %.3fs", epoch, step.loss, acc["train_acc"], acc["val_acc"], evaluation["val_loss"],
                 acc["test_acc"], step.seconds, evaluation["eval_time_s"], extra=EPOCH_LINE)

    def checkpoint(self, epoch: int) -> None:
        """The training state saved after epoch ``epoch``, every ``train.checkpoint_every`` epochs."""
        every = self.cfg.train.checkpoint_every
        if every is not None and self.state_path is not None and (epoch + 1) % every == 0:
            with signals_deferred():  # a signal now waits for the save: record and checkpoint agree
                save(self.state_path, training_state(self.cfg, self.trainee.model, self.optimizer,
                                                     self.record.epochs, self.record.trace),
                     keep_previous=True)

    def stops(self) -> bool:
        """Whether early stopping ends the run here (logged)."""
        epochs = self.record.epochs
        if not stops(epochs, self.patience, self.monitor):
            return False
        best = best_epoch(epochs, self.monitor)
        log.info("early stop after epoch %d: %s not better than %.4f (epoch %d) for %d epochs",
                 epochs[-1]["epoch"], self.monitor, best[self.monitor], best["epoch"], self.patience)
        return True

    def close(self) -> None:
        if self.drawing is not None:
            self.drawing.close()

    def summarise(self) -> None:
        """The run's final figures, medians over the timed epochs and pipeline figures, logged."""
        record, engine, store, monitor = self.record, self.trainee.engine, self.trainee.store, self.monitor
        epochs = record.epochs
        # per training step and evaluation pass, the mean over the epochs that read a feature file (a run
        # resumed from a checkpoint of data.features=memory has none before it)
        reads = [e["feature_reads"] for e in epochs if "feature_reads" in e]
        if store is not None and reads:
            features = record.features if record.features is not None else {}
            record.features = features
            for key in reads[-1]:
                features[f"{key}_mean"] = statistics.mean(r[key] for r in reads if key in r)
        # the first epoch is a warm-up; with a captured step, so is the second (it records the graph)
        timed_epochs = final_figures(record, self.cfg.train, timed_from=2 if self.replayed is not None else 1)
        best = best_epoch(epochs, monitor)
        last = epochs[-1]
        if self.historical:
            record.microbatch["history_per_stage"] = stage_medians(timed_epochs)
        record.pipeline = {**engine.info.as_dict(), "timeline": engine.timeline is not None,
                           **medians(e["pipeline"] for e in timed_epochs if "pipeline" in e)}
        log.info("done: test accuracy %.3f at the best validation epoch (%d, validation %s %.3f; the figure "
                 "results report), %.3f at the last; median epoch %.4fs", best["test_acc"], best["epoch"],
                 "accuracy" if monitor is Monitor.val_acc else "loss", best[monitor], last["test_acc"],
                 record.timing["epoch_time_median_s"])
        if "makespan_s" in record.pipeline:
            _log_figures(record.pipeline)


def _draw(trainee: Trainee, drawing: DrawAhead | None, epoch: int, last: int) -> dict[str, Any]:
    """With sampled halos, give the model epoch ``epoch``'s training micro-batches (epoch 0's are the
    plan's), start drawing the next epoch's (before ``last``; in the background with
    ``microbatch.draw_ahead``) and return the epoch record's ``sample_s`` (the draw's own time, wherever
    it ran), ``sample_wait_s`` (what the step waited for it), ``replace_s`` (the model's and the engine's
    structures swapped for the new draw: part of the step, as the wait is) and ``sampled_edges`` (every
    layer's edges, summed over micro-batches); without, nothing."""
    if drawing is None:
        return {}
    ids = trainee.training.ids
    if epoch:
        drawn = drawing.take(epoch)
        micro_batches = drawn.micro_batches
        start = time.perf_counter()
        trainee.model.replace(ids, micro_batches)
        trainee.engine.redraw(trainee.model, ids)
        figures = {"sample_s": drawn.sample_s, "sample_wait_s": drawn.wait_s,
                   "replace_s": time.perf_counter() - start}
    else:
        micro_batches = trainee.training.plan.micro_batches
        figures = {"sample_s": 0.0, "sample_wait_s": 0.0, "replace_s": 0.0}
    if epoch + 1 < last:
        drawing.start(epoch + 1)
    return {**figures, "sampled_edges": sum(e.size(1) for mb in micro_batches for e in mb.edges)}


def _optimizer(model: StagedGNN, train_cfg: TrainConfig,
               capturable: bool = False) -> torch.optim.Optimizer | None:
    """Adam over this process's parameters (None when it holds none: a pipeline rank may hold only the
    first layer's input rows and dropout), with ``train.conv_weight_decay``, when set, on the
    message-passing layers' parameters and ``train.weight_decay`` on the others (GCNII's Linear);
    ``capturable``: its step can be recorded in a CUDA graph (``engine.capture``)."""
    decay, conv_decay = train_cfg.weight_decay, train_cfg.conv_weight_decay
    layers: list[torch.nn.Parameter] = []
    dense: list[torch.nn.Parameter] = []
    for unit in model:
        (dense if unit.kind in ("input", "output") else layers).extend(unit.parameters())
    groups = [{"params": dense, "weight_decay": decay},
              {"params": layers, "weight_decay": decay if conv_decay is None else conv_decay}]
    groups = [g for g in groups if g["params"]]
    return torch.optim.Adam(groups, lr=train_cfg.lr, capturable=capturable) if groups else None


def _feature_reads(before: dict[str, int], trained: dict[str, int],
                   evaluated: dict[str, int]) -> dict[str, int]:
    """Bytes and read calls of the feature file in a training step and in an evaluation pass, from the
    store's counts before the step, after it and after the evaluation."""
    return {f"{phase}_{k}": b[k] - a[k] for phase, a, b in (("train", before, trained),
                                                            ("eval", trained, evaluated))
            for k in ("bytes", "calls")}


def _log_figures(p: dict[str, Any]) -> None:
    busy = ", ".join(f"{s['busy_s']:.3f}s" for s in p["stages"])
    log.info("pipeline (median step): makespan %.3fs, busy per stage [%s], bubble %.1f%% (schedule "
             "alone %.1f%%, with this imbalance %.1f%%), imbalance %.2f, communication %.3fs, ideal "
             "speedup %.2fx", p["makespan_s"], busy, 100 * p["bubble"], 100 * p["bubble_theoretical"],
             100 * p["bubble_ideal"], p["imbalance"], p["communication_s"], p["ideal_speedup"])

