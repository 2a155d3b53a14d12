"""Each epoch's evaluation with the halo mode's micro-batches (``microbatch.evaluation=plan``) against
layer-wise evaluation (``layerwise``), side by side in one run: the median evaluation time, its work
(inflation: rows and edges over full batch's), the training step, and the peak RSS.

Cases, each in a process of its own on one thread (``benchmarks/memory_case.py``), single engine, after a
warm-up epoch: full batch (chunks=1: one pass over the graph, the reference), then for every halo of
--halos and k of --chunks, each evaluated both ways (full batch too: one micro-batch, the same work).
Both evaluate every node's full neighbourhood (their outputs are equal: ``tests/test_exactness.py``);
``plan`` recomputes the halo rows micro-batches share (an exact L-hop halo per micro-batch, sampled
halos' too), ``layerwise`` computes each layer once per node over historical 1-hop blocks and keeps a
cache of every layer's input rows.

    PIPEGNN_DATA=../shared/datasets python benchmarks/evaluation.py --dataset amazon_computers_dense \\
        --model gcn --csv results/benchmarks/evaluation_gcn.csv 2>&1 \\
        | tee results/benchmarks/evaluation_gcn.txt

writes the CSV (one row per case) and beside it ``<name>_ratios.csv`` (layerwise / plan per mode).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_case import ROOT, case  # noqa: E402
from memory_report import log_case, show, side_by_side  # noqa: E402

HALOS = {"exact": [], "sampled": ["microbatch.fanouts=[25,10]"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="amazon_computers_dense")
    parser.add_argument("--model", default="gcn")
    parser.add_argument("--halos", nargs="+", default=list(HALOS), choices=list(HALOS))
    parser.add_argument("--chunks", nargs="+", type=int, default=[8, 32])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--safety-gb", type=float, default=12.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per case")
    parser.add_argument("--csv", type=Path, default=ROOT / "results" / "benchmarks" / "evaluation.csv")
    args = parser.parse_args(argv)
    common = [f"dataset={args.dataset}", f"model={args.model}", "engine=single",
              f"train.epochs={args.epochs}", "train.patience=null"]
    cases: list[tuple[str, str, list[str]]] = [
        ("full batch", evaluation, ["chunks=1", f"microbatch.evaluation={evaluation}"])
        for evaluation in ("plan", "layerwise")]
    for halo in args.halos:
        for k in args.chunks:
            for evaluation in ("plan", "layerwise"):
                overrides = [f"chunks={k}", f"microbatch.halo={halo}", *HALOS[halo],
                             f"microbatch.evaluation={evaluation}"]
                cases.append((f"{halo} k={k}", evaluation, overrides))
    rows: list[dict[str, Any]] = []
    for mode, evaluation, overrides in cases:
        row = {"mode": mode, "evaluation": evaluation,
               **case([*common, *overrides], {}, args.safety_gb, args.timeout)}
        log_case(f"{mode} {evaluation}", row)
        rows.append(row)
    about = f"{args.model} on {args.dataset}, single engine, 1 thread, {args.epochs} epochs"
    show(f"evaluation=plan vs layerwise: {about} (eval_s, epoch_s: medians after a warm-up epoch; MiB)", rows,
         ["mode", "evaluation", "status", "eval_s", "eval_inflation", "epoch_s", "inflation", "peak_mb",
          "train_mb", "total_s", "error"], args.csv)
    paired = side_by_side(rows, "evaluation", "plan", "layerwise", ("eval_s", "peak_mb", "total_s"))
    full = rows[0].get("eval_s")
    for row in paired:
        row["layerwise_eval_over_full_batch"] = (row["layerwise_eval_s"] / full
                                                 if full and row["layerwise_eval_s"] else None)
    show("layerwise / plan, per mode (and layer-wise evaluation over full batch's)", paired,
         ["mode", "plan_eval_s", "layerwise_eval_s", "eval_ratio", "layerwise_eval_over_full_batch",
          "plan_peak_mb", "layerwise_peak_mb", "peak_ratio", "total_ratio"], args.csv.with_name(
             args.csv.stem + "_ratios.csv"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
