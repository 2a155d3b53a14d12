"""What a piece of work asks of the host: aten operator calls and, among them, the calls that make the
host wait for a GPU (a device value read on the host), counted with ``torch.profiler``.

The counts do not depend on the device: a call that waits for a GPU is made on the CPU too, which is
what makes them a CPU proxy for a GPU's wait on the host. Waiting calls: ``_local_scalar_dense`` (every
``.item()``, ``int()``, ``float()`` or ``bool()`` of a tensor), ``nonzero`` (boolean-mask indexing goes
through it), ``masked_select``, ``unique`` and ``repeat_interleave`` (sizes computed from data), and
pipegnn's own reads of several values at once ([`read_on_host`][pipegnn.hostcalls.read_on_host]: a
``.tolist()``, which on a CPU tensor makes no aten call at all, so it is labelled).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from torch import Tensor
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import profile, record_function

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: The profiler label of [`read_on_host`][pipegnn.hostcalls.read_on_host].
HOST_READ = "pipegnn::read_on_host"
#: Operators (and labels) that read a device value on the host, or size an output by one.
SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::_unique2",
            "aten::unique_dim", "aten::unique_consecutive", "aten::repeat_interleave", HOST_READ)


def read_on_host(tensor: Tensor) -> Any:
    """``tensor``'s values on the host (``.tolist()``: a number for a 0-d tensor), labelled so that
    [`count_calls`][pipegnn.hostcalls.count_calls] counts the wait."""
    with record_function(HOST_READ):
        return tensor.tolist()


@dataclass(frozen=True)
class HostCalls:
    """Calls made by a piece of work: ``aten`` operator calls, ``syncs`` among them (and
    [`read_on_host`][pipegnn.hostcalls.read_on_host] reads), ``ops`` every profiled event by name."""

    aten: int
    syncs: int
    ops: Mapping[str, int]

    @classmethod
    def of(cls, ops: Mapping[str, int]) -> "HostCalls":
        """The counts of profiled events ``ops`` (name -> calls)."""
        aten = sum(n for name, n in ops.items() if name.startswith("aten::"))
        return cls(aten, sum(ops.get(name, 0) for name in SYNC_OPS), dict(ops))


def count_calls(work: Callable[[], Any]) -> HostCalls:
    """Run ``work`` once under ``torch.profiler`` (CPU activity) and count its calls, on every thread:
    torchgpipe runs its partitions' forward in worker threads of its own, which a profiler that
    follows only the calling thread (and autograd's) does not see."""
    with profile(experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        work()
    return HostCalls.of({e.key: e.count for e in prof.key_averages()})
