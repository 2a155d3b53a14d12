"""Measurements that go into every record: environment, wall-clock timing and peak memory."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterable

import torch

__all__ = ["env_info", "git_sha", "peak_device_bytes", "peak_rss_bytes", "reset_peaks", "timed"]

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


def peak_rss_bytes() -> int | None:
    """Peak resident set size since the last :func:`reset_peaks` (VmHWM), or None off Linux."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


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
