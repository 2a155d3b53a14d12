"""``engine.capture=cuda_graph``: the single engine's whole training step and its evaluation pass, each
recorded once as a CUDA graph and replayed, so that a step costs the host one launch and one read.

A plan is static (the same micro-batches and shapes every epoch) and a training step waits for the
device only for its loss ([`pipegnn.microbatch.current`][pipegnn.microbatch.current],
``tests/test_hostcalls.py``), so every kernel of a step (each micro-batch's forward and backward, the
once-per-step first transform, Adam with ``capturable=True``) can be recorded once (``torch.cuda.graph``) and
replayed by one call. Dropout draws new masks on every replay (torch's graph-safe RNG).

Epochs: the first runs eagerly on a side stream (what torch asks before a capture: lazily built
structures, index caches and library workspaces exist afterwards); the second records the graph, then
replays it (so it also trains); later ones replay. The evaluation graph is recorded at the first
evaluation after the training graph, in the same memory pool.

What cannot be captured is refused before training
([`capture_problems`][pipegnn.engines.capture.capture_problems]), each with its reason.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pipegnn.config.choices import Aggregation, Evaluation, FrameworkName, Halo, Precision, Storage
from pipegnn.config.schema import Config, SingleEngineConfig
from pipegnn.engines.base import Engine

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def capture_problems(cfg: Config) -> list[str]:
    """Why ``engine.capture=cuda_graph`` cannot record this run's steps (empty: it can)."""
    engine, problems = cfg.engine, []
    if not isinstance(engine, SingleEngineConfig):
        why = {"gpipe": "torchgpipe computes in worker threads, each on its own stream",
               "pipelining": "its stages exchange tensors between processes through torch.distributed"}
        problems.append(f"engine={engine.name}: only the single engine's step can be recorded ("
                        f"{why.get(engine.name, 'not one stream of one thread')})")
    elif not engine.device.startswith("cuda"):
        problems.append(f"engine.device={engine.device}: CUDA graphs need a CUDA device")
    if engine.timeline:
        problems.append("engine.timeline=true: the timeline reads host clocks between micro-batches; "
                        "set engine.timeline=false")
    if cfg.microbatch.halo is Halo.historical:
        problems.append("microbatch.halo=historical: its step is not recorded yet (the caches' step "
                        "counter and ages live on the device; the layer-wise refresh that evaluates it is "
                        "not recorded)")
    elif cfg.microbatch.evaluation is Evaluation.layerwise:
        problems.append("microbatch.evaluation=layerwise: the recorded evaluation is the plan's; set "
                        "microbatch.evaluation=plan")
    if cfg.microbatch.halo is Halo.sampled:
        problems.append("microbatch.halo=sampled: every epoch draws new blocks, of new shapes")
    if cfg.data.features is Storage.disk:
        problems.append(f"data.features={cfg.data.features}: rows read from a file on the host each step")
    if cfg.data.features is Storage.sparse:
        problems.append(f"data.features={cfg.data.features}: selecting sparse rows sizes them on the host")
    if cfg.framework.name is not FrameworkName.pyg:
        problems.append(f"framework={cfg.framework.name}: its kernels are not known to be "
                        "capturable (only PyG's message passing is)")
    if cfg.model.aggregation is not Aggregation.messages:
        problems.append(f"model.aggregation={cfg.model.aggregation}: torch's sparse CSR kernels are "
                        "not known to be capturable")
    if cfg.train.precision is not Precision.fp32:
        problems.append(f"train.precision={cfg.train.precision}: autocast's weight cache cannot live "
                        "across replays")
    return problems


class Replayed:
    """A single engine's training step (with the optimizer's) and evaluation pass as CUDA graphs.

    Args:
        engine: the single engine, on a CUDA device.
        optimizer: its optimizer, built with ``capturable=True`` (or None: no parameters to step).
        ids, labels, num_targets: the training step's arguments
            ([`Engine.step_loss`][pipegnn.engines.base.Engine.step_loss]), the same every step.
        eval_ids: the evaluation pass's micro-batches.
    """

    def __init__(self, engine: Engine, optimizer: torch.optim.Optimizer | None, ids: Tensor, labels: Tensor,
                 num_targets: int, eval_ids: Tensor):
        self.engine, self.optimizer = engine, optimizer
        self.ids, self.labels, self.num_targets, self.eval_ids = ids, labels, num_targets, eval_ids
        self.device = engine.input_device
        # one stream on the engine's device for the warm-up and both recordings: torch.cuda.graph's own
        # default stream is made on the current device, which need not be this one (cuda:1), and
        # graphs that share a memory pool are to be recorded on one stream
        self.stream = torch.cuda.Stream(self.device)
        self.steps = 0
        self._train: torch.cuda.CUDAGraph | None = None
        self._loss: Tensor | None = None
        self._eval: torch.cuda.CUDAGraph | None = None
        self._logits: Tensor | None = None

    @property
    def recording_epoch(self) -> int:
        """The epoch (of this run's steps, from 0) whose step records the training graph."""
        return 1

    def _step(self) -> Tensor:
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)  # backward assigns the gradients: replays too
        loss = self.engine.step_loss(self.ids, self.labels, self.num_targets)
        if self.optimizer is not None:
            self.optimizer.step()
        return loss

    def train_step(self) -> float:
        """One training step, optimizer included: eager on a side stream (the first), recorded and
        replayed (the second), replayed (later). Returns the loss, read on the host."""
        self.steps += 1
        with torch.cuda.device(self.device):
            if self.steps == 1:
                self.stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self.stream):
                    loss = self._step()
                torch.cuda.current_stream(self.device).wait_stream(self.stream)
                return float(loss)
            if self._train is None:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=self.stream):
                    loss = self._step()
                self._train, self._loss = graph, loss  # kept only once recorded
            self._train.replay()
            assert self._loss is not None  # recorded with the graph
            return float(self._loss)

    @torch.no_grad()
    def predict(self) -> Tensor:
        """The evaluation pass's logits ([`Engine.predict`][pipegnn.engines.base.Engine.predict]): eager until
        the training graph exists, then recorded once (in its memory pool) and replayed. The tensor is the
        graph's output, in the pool the training graph shares: read it before the next
        [`train_step`][pipegnn.engines.capture.Replayed.train_step]."""
        if self._train is None:
            return self.engine.predict(self.eval_ids)
        with torch.cuda.device(self.device):
            if self._eval is None:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self._train.pool(), stream=self.stream):
                    logits = self.engine.predict(self.eval_ids)
                self._eval, self._logits = graph, logits
            self._eval.replay()
            assert self._logits is not None  # recorded with the graph
            return self._logits
