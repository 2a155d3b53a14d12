"""What a spawned pipeline's run records of its workers (pipegnn/training/processes/outcome.py): rank 0's
record merged into the launcher's by the record type's rule, and which rank's failure is named."""
from __future__ import annotations

import signal
from typing import Any

from pipegnn.errors import ConfigError
from pipegnn.run_record import RunRecord, Status
from pipegnn.training.preemption import Interrupted
from pipegnn.training.processes.outcome import WorkerFailed, failure, merge


def _rank0(status: str = "completed", epochs: int = 2) -> dict[str, Any]:
    """Rank 0's record as it comes through its pipe (JSON)."""
    return {"record_version": 2, "status": status, "error": None, "config": {"chunks": 2},
            "choices": {}, "env": {"torch_threads": 2}, "epochs": [{"epoch": e} for e in range(epochs)],
            "final": {"test_acc": 0.8}, "timing": {"total_s": 3.0}, "memory": {"peak_rss_bytes": 7},
            "microbatch": {"chunks": 2}, "dataset": {"name": "cora"}, "model": {"parameters": 3},
            "pipeline": {"schedule": "1f1b"}, "trace": {"traceEvents": []}}


def _launcher_dict() -> dict[str, Any]:
    """The launcher's record before the workers report, as its file would hold it."""
    return {"status": "failed", "error": None, "config": {"chunks": 2}, "choices": {"model": "gat"},
            "env": {"torch_threads": 16}, "epochs": [], "final": {}, "timing": {}, "memory": {},
            "microbatch": {}}


def test_merge_into_a_record_in_place_by_the_record_types_rule() -> None:
    record = RunRecord.from_dict(_launcher_dict())
    merge(record, _rank0(), [{"epoch": 0}], completed=True)
    assert record.env == {"torch_threads": 2} and record.memory == {"peak_rss_bytes": 7}
    assert record.dataset == {"name": "cora"} and record.trace == {"traceEvents": []}
    assert len(record.epochs) == 2  # rank 0 reported more than it streamed
    # the launcher's own: status, choices, timing
    assert record.status is Status.FAILED and record.choices == {"model": "gat"} and record.timing == {}
    failed = RunRecord.from_dict(_launcher_dict())
    merge(failed, _rank0("failed", epochs=1), [{"epoch": 0}, {"epoch": 1}, {"epoch": 2}], completed=False)
    assert failed.memory == {} and failed.dataset == {"name": "cora"} and len(failed.epochs) == 3
    silent = RunRecord.from_dict(_launcher_dict())
    merge(silent, None, [{"epoch": 0}], completed=False)  # rank 0 died without reporting
    assert silent.epochs == [{"epoch": 0}] and silent.dataset is None and silent.env == {"torch_threads": 16}


def test_failure_names_the_rank_that_failed_first() -> None:
    assert failure([(0, 0), (1, 0)], {0: {"status": "completed"}, 1: {"status": "completed"}}) is None
    lost = {"status": "failed", "error": "RuntimeError: Connection reset by peer"}
    cause = failure([(1, 1), (0, 1)], {0: lost, 1: {"status": "oom", "error": "CUDA out of memory"}})
    assert isinstance(cause, MemoryError) and "rank 1" in str(cause)
    cause = failure([(0, 1)], {0: {"status": "invalid", "error": "chunks > targets"}})
    assert isinstance(cause, ConfigError) and str(cause) == "chunks > targets"
    stopped = {"status": "interrupted", "error": "x", "interrupted": {"signal": "SIGTERM"}}
    cause = failure([(0, 1)], {0: stopped})
    assert isinstance(cause, Interrupted) and cause.signum == signal.SIGTERM
    cause = failure([(1, -9), (0, 1)], {0: lost})
    assert isinstance(cause, WorkerFailed) and str(cause) == "pipeline worker rank 1 was killed by SIGKILL " \
                                                             "(exit code -9)"
    bad = {"status": "failed", "error": "ValueError: bad", "traceback": "tb"}
    cause = failure([(0, 1), (1, 1)], {0: lost, 1: bad})
    assert isinstance(cause, WorkerFailed) and "rank 1 failed: ValueError: bad" in str(cause)
    assert cause.worker_traceback == "tb"
