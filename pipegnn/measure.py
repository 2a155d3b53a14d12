"""Measurements that go into every record (environment, wall-clock timing, peak memory) and the
process's resources while it trains: its memory cap (``train.memory_limit_gb``) and its threads
(``engine.threads``)."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator

import torch

from pipegnn.errors import ConfigError

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

_PACKAGES = ("torch", "torch_geometric", "dgl", "torchgpipe", "hydra-core", "pymetis", "numpy")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_sha(path: str | Path | None = None) -> str | None:
    """Commit of the source tree (suffixed ``-dirty`` when it has uncommitted changes), or None."""
    cwd = Path(path or Path(__file__).resolve().parent)
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("-dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def env_info() -> dict:
    """Versions, git sha and hardware of this process (the ``env`` field of a record)."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "python": platform.python_version(),
        **{name.replace("-", "_"): _version(name) for name in _PACKAGES},
        "git_sha": git_sha(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpus": gpus,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def reset_peaks(devices: Iterable[torch.device] = ()) -> None:
    """Reset the process's peak RSS (Linux VmHWM) and the CUDA peak-memory counters of ``devices``."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass  # not Linux, or not permitted: the peak then covers the whole process
    for d in devices:
        if d.type == "cuda":
            torch.cuda.reset_peak_memory_stats(d)


def _status_bytes(key: str) -> int | None:
    """A size (kB) line of /proc/self/status, e.g. ``VmHWM``, in bytes; None off Linux."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss_bytes() -> int | None:
    """Peak resident set size since the last [`reset_peaks`][pipegnn.measure.reset_peaks] (VmHWM), or None off
    Linux."""
    return _status_bytes("VmHWM")


def peak_device_bytes(devices: Iterable[torch.device]) -> dict[str, int]:
    """Peak CUDA memory allocated per CUDA device in ``devices`` (empty on CPU)."""
    return {str(d): int(torch.cuda.max_memory_allocated(d)) for d in devices if d.type == "cuda"}


class timed:
    """Context manager measuring wall-clock seconds in ``.seconds``; synchronises CUDA ``devices``
    on entry and exit so that queued kernels are counted."""

    def __init__(self, devices: Iterable[torch.device] = ()):
        self.cuda = [d for d in devices if d.type == "cuda"]
        self.seconds = 0.0

    def _sync(self) -> None:
        for d in self.cuda:
            torch.cuda.synchronize(d)

    def __enter__(self) -> "timed":
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sync()
        self.seconds = time.perf_counter() - self._start


#: What a failed allocation raises: CUDA's torch.OutOfMemoryError; MemoryError from Python and NumPy;
#: and on CPU a plain RuntimeError from torch's allocator (torch 2.13), recognised by its message.
_CPU_ALLOCATOR_FAILURE = "DefaultCPUAllocator: can't allocate memory"


def allocation_failure(e: BaseException | None) -> BaseException | None:
    """The failed allocation (see ``_CPU_ALLOCATOR_FAILURE``) that ``e`` is, or was raised from
    (torch.distributed.pipelining wraps a stage's error in its own), else None."""
    seen = set()
    while e is not None and id(e) not in seen:
        if (isinstance(e, (torch.OutOfMemoryError, MemoryError))
                or (isinstance(e, RuntimeError) and _CPU_ALLOCATOR_FAILURE in str(e))):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def address_space_bytes() -> int | None:
    """This process's current virtual address space (Linux VmSize), or None off Linux."""
    return _status_bytes("VmSize")


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads (``torch.set_num_threads``), then restore the
    previous count (a sweep's next job in the same process starts from it); no-op for None."""
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def allocatable_bytes() -> int:
    """What this process may still allocate: the memory the system has available, or less under an
    address-space cap (``RLIMIT_AS``: ``train.memory_limit_gb``, ``prlimit``), its headroom above the
    address space in use."""
    import psutil

    available = int(psutil.virtual_memory().available)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except ImportError:
        return available
    used = address_space_bytes()
    if soft == resource.RLIM_INFINITY or used is None:
        return available
    return max(0, min(available, soft - used))


@contextmanager
def memory_limit(limit: int | None) -> Iterator[None]:
    """Cap this process's address space (``RLIMIT_AS`` soft limit) at ``limit`` bytes inside the block,
    then restore the previous limit; no-op for None.

    An allocation beyond the cap fails inside torch (or NumPy) and raises (see
    [`allocation_failure`][pipegnn.measure.allocation_failure]) instead of waking the kernel's OOM killer. The
    cap counts *virtual* memory: mapped libraries, thread stacks and allocator reservations count too, so the
    peak RSS a run reaches under it is lower: about 0.55 GiB lower with one thread after importing torch and
    PyG (their mapped but non-resident pages), more with more threads (8 MiB stack and up to 64 MiB malloc
    arena each). Processes started inside the block (``engine=pipelining`` ranks) inherit it. A C++ library
    that cannot handle a failed allocation may still abort the process (DGL 1.1.3's kernels can, see
    docs/memory.md).

    Raises:
        ConfigError: no ``resource`` module (not a Unix), or ``limit`` is already below this process's
            address space (nothing could be allocated).
    """
    if limit is None:
        yield
        return
    try:
        import resource
    except ImportError as e:
        raise ConfigError("train.memory_limit_gb needs a Unix system (resource.RLIMIT_AS); use null") from e
    used = address_space_bytes()
    if used is not None and limit <= used:
        raise ConfigError(f"train.memory_limit_gb={limit / 2**30:.3g} is below this process's address "
                          f"space before training ({used / 2**30:.2f} GiB, mostly libraries); use more")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)  # never loosen a stricter cap set from outside
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
