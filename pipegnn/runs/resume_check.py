"""The resume check of a sweep's job: whether the record in its output directory can be kept.

[`completed_record`][pipegnn.runs.resume_check.completed_record]: with ``resume=true`` a job whose output
directory already holds a ``completed`` record of the same configuration (compared as
[`comparable_config`][pipegnn.config.compare.comparable_config] makes it) is skipped
(``experiments/train.py``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig

from pipegnn.config.compare import comparable_config
from pipegnn.results.record_files import RECORD_NAME, RecordError, is_entry, load_record
from pipegnn.run_record import RunRecord, Status

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [f"{prefix[:-1]}: {a!r} -> {b!r}"]


def completed_record(output_dir: str | Path, config: Mapping[str, Any] | DictConfig
                     ) -> tuple[RunRecord | None, str]:
    """The record to keep when resuming: ``output_dir/result.json`` (read as every record is,
    [`load_record`][pipegnn.results.record_files.load_record]) if it is ``completed`` and was made with the
    same config (see [`comparable_config`][pipegnn.config.compare.comparable_config]), else None; with the
    reason either way (logged by the caller)."""
    path = Path(output_dir) / RECORD_NAME
    if not is_entry(path):
        return None, "no previous record"
    try:
        record = load_record(path)
    except RecordError as e:
        return None, f"previous record unreadable ({e.reason})"
    except OSError as e:
        return None, f"previous record unreadable ({type(e).__name__}: {e})"
    if record.status is not Status.COMPLETED:
        return None, f"previous record is {record.status.value}"
    # A key an older record lacks and this config leaves null (a later option's default) is no change.
    diff = _differences(comparable_config(record.config, output_dir),
                        comparable_config(config, output_dir))
    if diff:
        more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
        return None, f"config changed since the completed record: {'; '.join(diff[:3])}{more}"
    return record, "completed"
