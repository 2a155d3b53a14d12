"""Drawing sampled halos one epoch ahead (``microbatch.draw_ahead``): epoch e+1's draw in a background
thread (on a GPU, its own CUDA stream) while epoch e trains, so that a sampled step waits only for what is
left of its draw."""
from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch

from pipegnn.microbatch.halo import MicroBatch
from pipegnn.microbatch.sample import NeighbourSampler
from pipegnn.microbatch.threads import one_thread_pool

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


@dataclass(frozen=True)
class Drawn:
    """One epoch's micro-batches, how long drawing them took (``sample_s``, wherever it ran) and how long
    the training step waited for them (``wait_s``: the whole draw when drawn in series)."""

    micro_batches: list[MicroBatch]
    sample_s: float
    wait_s: float


class DrawAhead:
    """Draws a sampler's epochs one ahead, in a thread of its own, while the epoch before trains: a
    sampled step then waits only for what is left of its draw (``microbatch.draw_ahead``). Each epoch's
    draw is the sampler's for that epoch whenever it is drawn, so the losses are those of drawing in
    series.

    On a CPU the draw runs on one core beside the training's threads (one worker, its thread's torch
    operations on one intra-op thread: ``one_thread_pool``), and a draw in series with every core; with
    a CUDA sampler it draws on a stream of its own, and the step's stream waits for it.

    Args:
        sampler: the epochs' sampler.
        ahead: draw in the background; False draws each epoch when it is taken, in series.
    """

    def __init__(self, sampler: NeighbourSampler, ahead: bool = True):
        self.sampler = sampler
        self._pool = one_thread_pool(1, "pipegnn-draw") if ahead else None
        self._pending: tuple[int, Future[tuple[list[MicroBatch], float, Any]]] | None = None
        self._stream = torch.cuda.Stream(sampler.device) if ahead and sampler.device.type == "cuda" else None

    def _draw(self, epoch: int) -> tuple[list[MicroBatch], float, Any]:
        start = time.perf_counter()
        if self._stream is None:  # one worker: the training's threads keep the other cores
            return self.sampler.draw(epoch, workers=1), time.perf_counter() - start, None
        with torch.cuda.stream(self._stream):
            drawn = self.sampler.draw(epoch)
            done = torch.cuda.Event()
            done.record(self._stream)
        return drawn, time.perf_counter() - start, done

    def start(self, epoch: int) -> None:
        """Begin drawing epoch ``epoch`` in the background (nothing when drawing in series)."""
        if self._pool is not None:
            self._settle()
            self._pending = epoch, self._pool.submit(self._draw, epoch)

    def take(self, epoch: int) -> Drawn:
        """Epoch ``epoch``'s micro-batches: the background draw's when it was started, else drawn now."""
        started = time.perf_counter()
        if self._pending is None or self._pending[0] != epoch:
            self._settle()
            micro_batches = self.sampler.draw(epoch)  # here, on the step's stream
            seconds = time.perf_counter() - started
            return Drawn(micro_batches, seconds, seconds)
        future = self._pending[1]
        self._pending = None
        micro_batches, seconds, done = future.result()
        if done is not None:  # the step's stream waits for the draw's, and its tensors are the step's now
            stream = torch.cuda.current_stream(self.sampler.device)
            stream.wait_event(done)
            for mb in micro_batches:
                for t in (mb.nodes, *mb.edges, *(w for w in mb.weights if w is not None)):
                    t.record_stream(stream)
        return Drawn(micro_batches, seconds, time.perf_counter() - started)

    def _settle(self) -> None:
        """Let a background draw that nobody will take finish (the sampler's scratch is one)."""
        if self._pending is not None:
            self._pending[1].result()
            self._pending = None

    def close(self) -> None:
        """Stop the thread (a pending draw is finished and dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._pending = None
