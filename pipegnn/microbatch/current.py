"""Which micro-batch the units on this thread compute, told on the host by whoever runs them.

A unit selects its micro-batch's rows, blocks and caches by the micro-batch's id. Reading that id from
the id tensor the pipe carries (``int(ids[0])``) is a device-to-host copy: on a GPU, a wait for every
kernel queued before it, once per unit and micro-batch. Whoever runs the units knows the id on the host
already: the single engine and the layer-wise refresh from their loops, a pipelining stage from its
schedule's chunk index ([`computing`][pipegnn.microbatch.current.computing]). torchgpipe runs a micro-batch's
partitions in its own worker threads, so a GPipe step installs a `Resolver` instead
([`resolving`][pipegnn.microbatch.current.resolving]), which the units ask with the id tensor they received:
it answers from host metadata only.

Written by hand: neither torch nor torchgpipe offers a per-micro-batch context that units can read.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from torch import Tensor

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Given the id tensor a unit received, the id of the micro-batch it computes.
Resolver = Callable[[Tensor], int]

_local = threading.local()
_resolver: list[Resolver] = []  # process-wide: torchgpipe's worker threads compute under it


@contextmanager
def computing(micro_batch: int) -> Iterator[None]:
    """Units run on this thread inside the block compute micro-batch ``micro_batch``."""
    previous = getattr(_local, "micro_batch", None)
    _local.micro_batch = micro_batch
    try:
        yield
    finally:
        _local.micro_batch = previous


@contextmanager
def resolving(resolver: Resolver) -> Iterator[None]:
    """Inside the block, units on any thread not inside [`computing`][pipegnn.microbatch.current.computing]
    ask ``resolver``."""
    _resolver.append(resolver)
    try:
        yield
    finally:
        _resolver.remove(resolver)


def current(ids: Tensor) -> int:
    """The micro-batch the calling unit computes (``ids``: the id tensor it received, for a resolver).

    Raises:
        RuntimeError: nobody said which (units run outside [`computing`][pipegnn.microbatch.current.computing]
            and [`resolving`][pipegnn.microbatch.current.resolving]).
    """
    micro_batch = getattr(_local, "micro_batch", None)
    if micro_batch is not None:
        return micro_batch
    if _resolver:
        return _resolver[-1](ids)
    raise RuntimeError("a unit ran without being told its micro-batch: run units inside "
                       "pipegnn.microbatch.current.computing(m) (the engines and StagedGNN.refresh do)")
