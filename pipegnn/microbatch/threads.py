"""Thread pools whose torch operations run on one intra-op thread each: the draw's workers and the draw
ahead of training (``pipegnn.microbatch.sample``, ``pipegnn.microbatch.draw_ahead``)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait

import torch

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def one_thread_pool(workers: int, name: str) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads whose torch operations run on one intra-op thread each, without a
    thread count ever set in them: torch gives a thread the process's default count when it first asks
    for it, and ``torch.set_num_threads`` in any thread sets that default for every thread started
    later (a draw's thread setting its own count left later threads, torchgpipe's workers among them, at
    one). Each pool thread asks while the calling thread holds the default at one; then the calling
    thread's count is restored."""
    threads = torch.get_num_threads()
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    ready = threading.Barrier(workers)  # each of the first tasks holds its thread: one task a thread
    torch.set_num_threads(1)
    try:
        wait([pool.submit(_first_operation, ready) for _ in range(workers)])
    finally:
        torch.set_num_threads(threads)
    return pool


def _first_operation(ready: threading.Barrier) -> None:
    """A pool thread's first look at its thread count, which fixes it at the default's now, once every
    thread of the pool holds one of these tasks."""
    ready.wait()
    torch.get_num_threads()
