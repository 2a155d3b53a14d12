"""Recording a training step's stage timeline: one box per stage, micro-batch and kind of work.

Boxes are what a Gantt chart of a pipeline shows: ``forward`` and ``backward`` of a micro-batch on a
stage, ``recompute`` (torchgpipe's checkpointed forward, run again during backward), ``recv_forward`` /
``recv_backward`` (a ``pipelining`` rank waiting for the activation / gradient it needs) and, on the
first stage, ``shared_forward`` / ``shared_backward`` (the first layer's transform, run once per step for
all micro-batches before the first and after the last; micro-batch -1). Every box is also a
``torch.profiler.record_function`` label where the engine has none of its own (the ``pipelining``
schedules already label their actions ``Forward i`` / ``Backward i``), so a ``torch.profiler`` trace
shows the same boxes.

Written by hand: torch.profiler gives per-operator events (too costly to keep on by default and without
the stage / micro-batch structure), and neither torchgpipe nor torch.distributed.pipelining reports when
a stage ran a micro-batch. Times come from ``time.perf_counter`` on CPU and from CUDA events on GPUs
(recorded on the stage's current stream, resolved after the step's closing synchronisation, so nothing
inside the step waits for them).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

from pipegnn.microbatch.current import current

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Kinds of boxes; those in `BUSY` are a stage's busy time, those in `COMMUNICATION` waits.
KINDS = ("forward", "backward", "recompute", "shared_forward", "shared_backward", "recv_forward",
         "recv_backward")
BUSY = ("forward", "backward", "recompute", "shared_forward", "shared_backward")
COMMUNICATION = ("recv_forward", "recv_backward")


@dataclass(frozen=True)
class Box:
    """One stretch of work of one stage.

    Attributes:
        stage: pipeline stage index.
        lane: what runs the stage (its rank for ``pipelining``, else the stage itself).
        micro_batch: position of the micro-batch in the step (0..k-1; -1: the whole step's).
        kind: one of `KINDS`.
        start, end: seconds since the timeline's origin.
    """

    stage: int
    lane: int
    micro_batch: int
    kind: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Timeline:
    """Collects the boxes of the current training step.

    Args:
        devices: the device of every stage (index = stage).
        lanes: the lane of every stage (default: one lane per stage).
    """

    def __init__(self, devices: Sequence[torch.device], lanes: Sequence[int] | None = None):
        self.devices = list(devices)
        self.lanes = list(lanes) if lanes is not None else list(range(len(self.devices)))
        self.recording = False
        self.origin = time.perf_counter()
        self._pending: list[tuple[int, int, str, Any, Any]] = []
        self._lane_end: dict[int, float] = {}  # latest CPU end stamp of each lane in this step
        self._step_host = 0.0
        self._origin_events: dict[torch.device, Any] = {}

    def set_origin(self) -> None:
        """Count times from now (``pipelining`` ranks call it right after a barrier)."""
        self.origin = time.perf_counter()

    def begin(self) -> None:
        """Start recording a training step (forgets the previous step's boxes)."""
        self._pending.clear()
        self._lane_end.clear()
        self._origin_events.clear()
        self._step_host = time.perf_counter() - self.origin
        for d in set(self.devices):
            if d.type == "cuda":
                event = torch.cuda.Event(enable_timing=True)
                event.record(torch.cuda.current_stream(d))
                self._origin_events[d] = event
        self.recording = True

    def now(self, stage: int) -> Any:
        """A time stamp on ``stage``'s device (a float on CPU, a recorded CUDA event on a GPU)."""
        device = self.devices[stage]
        if device.type != "cuda":
            return time.perf_counter() - self.origin
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event

    def add(self, stage: int, micro_batch: int, kind: str, start: Any, end: Any) -> None:
        """Record one box between two stamps of [`now`][pipegnn.timeline.boxes.Timeline.now]."""
        if self.recording:
            self._pending.append((stage, micro_batch, kind, start, end))
            if isinstance(end, float):
                lane = self.lanes[stage]
                self._lane_end[lane] = max(end, self._lane_end.get(lane, end))

    def add_wait(self, stage: int, micro_batch: int, kind: str, asked: Any, start: Any) -> None:
        """Record a wait from ``asked`` (when the schedule asked for a receive) to ``start`` (when the
        computation that needed it began), clipped on CPU to the end of the lane's previous box (a
        schedule may ask for a receive long before it waits for it)."""
        if isinstance(asked, float):
            asked = max(asked, self._lane_end.get(self.lanes[stage], asked))
        self.add(stage, micro_batch, kind, asked, start)

    def end(self) -> list[Box]:
        """Stop recording and return the step's boxes (call after the step's closing CUDA
        synchronisation, which ``measure.timed`` does), sorted by start."""
        self.recording = False
        boxes = [Box(s, self.lanes[s], m, kind, self._seconds(s, a), self._seconds(s, b))
                 for s, m, kind, a, b in self._pending]
        self._pending.clear()
        return sorted(boxes, key=lambda b: (b.start, b.stage))

    def _seconds(self, stage: int, stamp: Any) -> float:
        if isinstance(stamp, float):
            return stamp
        stamp.synchronize()  # already complete after the step's synchronisation: no wait
        origin = self._origin_events[self.devices[stage]]
        return self._step_host + origin.elapsed_time(stamp) / 1e3


def _earliest_node(root: Any) -> Any:
    """The autograd node of ``root``'s graph (a tensor's ``grad_fn``) created first (the smallest sequence
    number; AccumulateGrad leaves excluded): the node that backward runs last, since the engine runs ready
    nodes in decreasing sequence order."""
    assert root is not None, "no grad_fn: no recorded operation computed it"
    best = root
    seen, stack = {id(root)}, [root]
    while stack:
        for nxt, _ in stack.pop().next_functions:
            if nxt is None or id(nxt) in seen or type(nxt).__name__ == "AccumulateGrad":
                continue
            seen.add(id(nxt))
            stack.append(nxt)
            if nxt._sequence_nr() < best._sequence_nr():
                best = nxt
    return best


class HookProbe:
    """Times stages that run in this process (``single``, ``gpipe``) with module and autograd hooks.

    Forward (and recompute) boxes come from forward pre/post hooks on each stage module. Backward boxes
    start when the gradient of the stage's output arrives (a hook on a view of the output) and end when
    the stage's backward has finished: when the gradient of its input is computed (a hook on a view of
    the input) or, for a first stage whose input needs no gradient, when its earliest autograd node has
    run (a node post-hook). That node is looked for in the graph of the stage's first unit that records
    one (a forward hook on each unit notes it), not in the whole stage's: walking every node of a deep
    stage's graph (GCNII 64: thousands) in Python, once per micro-batch, cost more host time than the
    step's own launches.

    A box's micro-batch is the one the stage's units compute, as they learn it: from the host
    ([`pipegnn.microbatch.current.current`][pipegnn.microbatch.current.current]: the single engine's loop,
    GPipe's per-micro-batch resolver), never by reading the id tensor's value, which on a GPU would wait for
    the device once per stage and micro-batch.

    Args:
        timeline: where boxes go.
        stages: the stage modules (each called with one tuple ``(ids,)`` or ``(h, ids)``).
        recomputing: tells whether a forward call is a checkpoint's recomputation (torchgpipe).
    """

    def __init__(self, timeline: Timeline, stages: Sequence[nn.Module],
                 recomputing: Callable[[], bool] = lambda: False):
        self.timeline, self.recomputing = timeline, recomputing
        self._open: dict[int, tuple[int, str, Any]] = {}
        self._backward: dict[tuple[int, int], Any] = {}
        self._labels: dict[int, Any] = {}
        self._first_node: dict[int, Any] = {}  # stage -> the first unit's recorded node, this forward
        self.handles = []
        for s, module in enumerate(stages):
            self.handles.append(module.register_forward_pre_hook(partial(self._pre, s)))
            self.handles.append(module.register_forward_hook(partial(self._post, s)))
            for unit in module.children():
                self.handles.append(unit.register_forward_hook(partial(self._unit_post, s)))

    def remove(self) -> None:
        """Detach every hook."""
        for h in self.handles:
            h.remove()

    def _pre(self, stage: int, module: nn.Module, args: tuple) -> tuple | None:
        if not self.timeline.recording:
            return None
        inputs = args[0]
        m = current(inputs[-1])  # on the host, as the units learn it: no device read
        kind = "recompute" if self.recomputing() else "forward"
        label = torch.profiler.record_function(f"stage{stage} {kind} {m}")
        label.__enter__()
        self._labels[stage] = label
        self._first_node.pop(stage, None)
        self._open[stage] = (m, kind, self.timeline.now(stage))
        if torch.is_grad_enabled() and len(inputs) > 1 and inputs[0].requires_grad:
            h = inputs[0].view_as(inputs[0])
            h.register_hook(partial(self._backward_end, stage, m))
            return ((h, *inputs[1:]),)
        return None

    def _post(self, stage: int, module: nn.Module, args: tuple, output: tuple) -> tuple | None:
        if stage not in self._open:
            return None
        m, kind, start = self._open.pop(stage)
        first = self._first_node.pop(stage, None)  # (kept no longer: a model with it cannot be copied)
        self.timeline.add(stage, m, kind, start, self.timeline.now(stage))
        self._labels.pop(stage).__exit__(None, None, None)
        h = output[0]
        if not (torch.is_grad_enabled() and h.requires_grad):
            return None
        inputs = args[0]
        if not (len(inputs) > 1 and inputs[0].requires_grad):  # no input hook: end at the first node
            _earliest_node(h.grad_fn if first is None else first).register_hook(
                lambda *_: self._backward_end(stage, m))
        h = h.view_as(h)
        h.register_hook(partial(self._backward_start, stage, m))
        return (h, *output[1:])

    def _unit_post(self, stage: int, module: nn.Module, args: tuple, output: Any) -> None:
        """Note the node of the stage's first unit, in this forward, whose output has one."""
        if stage not in self._open or stage in self._first_node:
            return
        h = output[0] if isinstance(output, tuple) else output
        if isinstance(h, Tensor) and h.grad_fn is not None:
            self._first_node[stage] = h.grad_fn

    def _backward_start(self, stage: int, m: int, grad: Tensor) -> None:
        self._backward[stage, m] = self.timeline.now(stage)

    def _backward_end(self, stage: int, m: int, *_: Any) -> None:
        start = self._backward.pop((stage, m), None)
        if start is not None:
            self.timeline.add(stage, m, "backward", start, self.timeline.now(stage))
