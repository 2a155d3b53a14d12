"""Where a training step's time goes: torch.profiler over the steps of several runs, operator by operator.

For each case (full batch, and micro-batched runs of the single engine: exact and historical halos by
default), ``torch.profiler`` records the training steps only (not setup, not evaluation) of a short
run; the table gives, per operator, its self CPU seconds per step in each case and their ratio to the
first case, largest first, with the step total and the work inflation (rows computed / the graph's)
of each case. So an overhead beyond the work inflation (a historical step slower than its extra rows
explain) shows up by name: cache pushes and pulls (``index_copy_``, ``index_select``), the
concatenation of pulled rows (``cat``), the units' Python per micro-batch (the engines' labels, e.g.
``stage0 forward``), kernels that grow with the rows read rather than the rows computed (dropout's
``bernoulli_`` on halo rows).

    OMP_NUM_THREADS=1 python benchmarks/profile_step.py model=gcn2 model.layers=16 \\
        --csv results/benchmarks/profile_gcn2_16.csv
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.profiler import ProfilerAction, profile

from pipegnn import run
from pipegnn.config.schema import compose_config
from pipegnn.engines import Engine, Replayed

#: case name: overrides.
CASES = {
    "full batch": ["engine=single", "chunks=1", "microbatch.halo=none"],
    "exact k=8": ["engine=single", "chunks=8", "microbatch.halo=exact"],
    "historical k=8": ["engine=single", "chunks=8", "microbatch.halo=historical"],
    "historical k=8, node masks": ["engine=single", "chunks=8", "microbatch.halo=historical",
                                   "microbatch.halo_dropout=node"],
}


def profile_steps(overrides: list[str], epochs: int,
                  warmup: int = 1) -> tuple[dict[str, float], dict[str, int], int, dict[str, Any]]:
    """Self CPU seconds and calls per operator summed over the training steps after the first
    ``warmup`` (with ``engine.capture=cuda_graph``: 2, the eager step and the recording), the number of
    steps profiled, and the run's record. A step is the engine's (``Engine.train_step``) or, captured,
    the replayed one (``Replayed.train_step``, the optimizer's step included)."""
    totals: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    steps = 0

    def collect(prof: profile) -> None:
        nonlocal steps
        steps += 1
        for event in prof.key_averages():
            # the engines' per-micro-batch labels ("stage0 forward 3"): their self time is the Python
            # of the units (the per-micro-batch overhead), summed over micro-batches
            key = re.sub(r"^(stage\d+ \w+) \d+$", r"\1 (python, all micro-batches)", event.key)
            totals[key] += event.self_cpu_time_total / 1e6
            calls[key] += event.count

    # Odd profiler steps record, even ones do not: each training step is wrapped in two step() calls,
    # so exactly the steps are recorded (the epoch's evaluation falls in a "none" step).
    prof = profile(schedule=lambda step: ProfilerAction.RECORD_AND_SAVE if step % 2 else ProfilerAction.NONE,
                   on_trace_ready=collect)
    seen = 0

    def profiled(original: Any) -> Any:
        def train_step(self: Any, *args: Any, **kwargs: Any) -> float:
            nonlocal seen
            seen += 1
            if seen <= warmup:  # warm-up steps are not profiled
                return original(self, *args, **kwargs)
            prof.step()
            try:
                return original(self, *args, **kwargs)
            finally:
                prof.step()
        return train_step

    originals = {cls: cls.train_step for cls in (Engine, Replayed)}
    for cls, original in originals.items():  # benchmark-only instrumentation of the steps
        cls.train_step = profiled(original)
    try:
        with prof:
            record = run(compose_config([f"train.epochs={epochs}", *overrides]))
    finally:
        for cls, original in originals.items():
            cls.train_step = original
    if record["status"] != "completed":
        raise RuntimeError(f"{overrides}: {record['status']}: {record['error']}")
    return dict(totals), dict(calls), steps, record


def measure(args: argparse.Namespace) -> tuple[pd.DataFrame, pd.DataFrame]:
    per_op, cases = {}, []
    for name in args.cases:
        totals, _, steps, record = profile_steps([*CASES[name], "microbatch.targets=all", *args.overrides],
                                              args.epochs)
        per_op[name] = {op: seconds / steps for op, seconds in totals.items()}
        cases.append({"case": name, "profiled_steps": steps, "step_self_cpu_s": sum(per_op[name].values()),
                      "epoch_s_profiled": record["timing"]["epoch_time_median_s"],
                      "inflation": record["microbatch"].get("inflation")})
        print(f"{name}: {steps} steps, {cases[-1]['step_self_cpu_s']:.3f} s per step",
              file=sys.stderr, flush=True)
    table = pd.DataFrame(per_op).fillna(0.0)
    first = args.cases[0]
    table = table.sort_values(args.cases[-1], ascending=False)
    for name in args.cases[1:]:
        table[f"{name} / {first}"] = table[name] / table[first].where(table[first] > 0)
    summary = pd.DataFrame(cases)
    summary["step_vs_first"] = summary.step_self_cpu_s / summary.step_self_cpu_s.iloc[0]
    return table.head(args.top).rename_axis("operator").reset_index(), summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--epochs", type=int, default=4, help="epochs per case (the first step is a warm-up)")
    parser.add_argument("--top", type=int, default=25, help="operators shown, by the last case's time")
    parser.add_argument("--csv", type=Path,
                        help="write the operator table here, the cases beside it (_cases)")
    parser.add_argument("overrides", nargs="*", help="config overrides for every case (e.g. model=gcn2)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    table, summary = measure(args)
    print("cases (self CPU seconds per training step; epoch_s_profiled: the record's median epoch, the "
          "profiler's own cost per operator included; inflation: rows computed / the graph's)")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\noperators: self CPU seconds per training step, and the ratio to the first case")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
        summary.to_csv(args.csv.with_name(f"{args.csv.stem}_cases.csv"), index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
