"""One case of ``benchmarks/memory.py``, measured in a process of its own.

:func:`case` runs a case in a fresh subprocess (``python benchmarks/memory_case.py --child ...``) that
calls ``pipegnn.run`` (:func:`child`), so each peak resident set size (Linux VmHWM) is that case's alone.
Besides the record's ``memory.peak_rss_bytes`` (the whole run, reset at its start), the child splits the
peak into *setup* (graph generation, partition, plan build, model) and *train* (the epochs: training
steps and evaluation), and notes the resident memory before the run (``base``: Python, torch, PyG, ...)
and when training starts (``held``: features, graph, plans, model; measured after glibc's
``malloc_trim`` hands the setup's freed heap back to the OS, which the child does at that point). Every
child runs under ``train.memory_limit_gb`` (the caller's ``safety_gb`` unless the case sets its own
cap), so a case that outgrows it is an ``oom`` row instead of a visit from the OOM killer.

Imports only the standard library at the top, so that ``base`` is what the child's run starts from.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MiB = 2 ** 20
EXTRA: list[str] = []  # --overrides given on memory.py's command line, applied last to every case


# ----------------------------------------------------------------------------------------------- child
def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not found: this benchmark needs Linux /proc")


def _trim() -> None:
    """glibc's malloc_trim(0): give freed heap memory back to the OS (no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one case in this process: compose the overrides, set the extra keys, run, measure."""
    from omegaconf import OmegaConf

    import pipegnn.training.rank as rank
    from pipegnn import run
    from pipegnn.config.schema import compose_config
    from pipegnn.measure import peak_rss_bytes, reset_peaks
    from pipegnn.runs.record_writes import write_record

    cfg = OmegaConf.to_container(compose_config(spec["overrides"]), resolve=True)
    for dotted, value in spec.get("set", {}).items():  # keys the typed schema may not know yet
        group, key = dotted.split(".")
        cfg[group][key] = value
    marks: dict[str, int] = {}
    fit = rank.fit  # the epoch loop, as one process's run calls it (pipegnn.training.epochs.fit)

    def measured_fit(*args: Any, **kwargs: Any) -> None:
        marks["setup_peak"] = peak_rss_bytes()
        _trim()  # return the setup's freed heap to the OS, so that `held` is what training starts with
        marks["held"] = _status_kb("VmRSS")
        reset_peaks()
        fit(*args, **kwargs)
        marks["train_peak"] = peak_rss_bytes()

    rank.fit = measured_fit
    base = _status_kb("VmRSS")
    start = time.perf_counter()
    record = run(cfg)
    seconds = time.perf_counter() - start
    if spec.get("record"):  # the run's whole record (config, versions, sha, history), kept as a result
        write_record(Path(spec["record"]).parent, record, Path(spec["record"]).name)
    # The run records its setup's peak and resets the counter before training (so does measured_fit,
    # after its own reading): the case's peak is the larger of the two phases'.
    setup_peak = max(marks.get("setup_peak", 0), record["memory"].get("setup_peak_rss_bytes") or 0)
    peak = max(setup_peak, record["memory"]["peak_rss_bytes"] or 0)
    mb = record.get("microbatch") or {}
    return {"status": record["status"], "error": (record["error"] or "")[:300],
            "peak_mb": peak / MiB, "setup_mb": (setup_peak or peak) / MiB,
            "train_mb": marks["train_peak"] / MiB if "train_peak" in marks else None,
            "held_mb": marks["held"] / MiB if "held" in marks else None, "base_mb": base / MiB,
            "edges": (record.get("dataset") or {}).get("num_edges"),
            "feature_mb": ((record.get("dataset") or {}).get("feature_bytes") or 0) / MiB or None,
            "inflation": mb.get("inflation"), "replication": mb.get("replication"),
            "eval_inflation": (mb.get("eval") or {}).get("inflation"),
            "epoch_s": record["timing"].get("epoch_time_median_s"),
            "eval_s": record["timing"].get("eval_time_median_s"), "total_s": seconds,
            "load_s": record["timing"].get("load_s"), "order_s": record["timing"].get("features_order_s"),
            "build_s": record["timing"].get("microbatch_build_s"),
            "step_read_mb": ((record.get("features") or {}).get("train_bytes_mean") or 0) / MiB or None,
            "step_read_calls": (record.get("features") or {}).get("train_calls_mean")}


# ---------------------------------------------------------------------------------------------- parent
def case(overrides: list[str], sets: dict[str, Any], safety_gb: float, timeout: float,
         record: Path | None = None) -> dict[str, Any]:
    """One case in a fresh subprocess (OMP_NUM_THREADS=1); a child killed or timed out is a row too.
    With ``record``, the child also writes the run's record there."""
    sets = {"train.memory_limit_gb": safety_gb, **sets}
    with tempfile.TemporaryDirectory(prefix="pipegnn-mem-") as tmp:
        out = Path(tmp) / "case.json"
        spec = {"overrides": ["microbatch.cache=null", *overrides, *EXTRA], "set": sets,
                "record": str(record) if record else None}
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        cmd = [sys.executable, __file__, "--child", json.dumps(spec), "--child-out", str(out)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "error": f"over {timeout:.0f}s", "total_s": timeout}
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or "").strip().splitlines()[-3:]
            return {"status": f"died({proc.returncode})", "error": " | ".join(tail)[:300],
                    "total_s": time.perf_counter() - start}
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    """The child's entry point: run the case ``--child`` (a JSON spec), write its row to ``--child-out``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", required=True, help="the case: JSON of overrides, set keys and record")
    parser.add_argument("--child-out", type=Path, required=True, help="where its row goes (JSON)")
    args = parser.parse_args(argv)
    args.child_out.write_text(json.dumps(child(json.loads(args.child))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
