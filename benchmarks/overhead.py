"""Epoch time, accuracy and memory of micro-batched training relative to plain full-batch training.

Every case is a set of config overrides run in this process with ``pipegnn.run``; the table prints each
case's median epoch time as a ratio to the first case (the baseline) of the suite, side by side.

    python benchmarks/overhead.py --suite core --dataset cora --epochs 200
    python benchmarks/overhead.py --suite halo --dataset pubmed_topology --epochs 20 --csv out.csv

Suites:
    core     full batch vs GPipe k=8 exact (METIS) vs GPipe k=8 naive, plus single-engine k=8 exact
    halo     none / exact / historical at k=8 (METIS, GPipe)
    chunks   GPipe exact METIS at k = 1, 2, 4, 8, 16, 32
    engines  framework pyg / dgl x engine single / gpipe / pipelining (2 stages) x k = 1, 4, 8 (exact)
    accuracy full batch vs GPipe k=8 exact (METIS) vs GPipe k=8 naive contiguous chunks (the poster's)
    goals    the overhead goals side by side: exact GPipe k=8 and k=32 (METIS) over full batch, GPipe over
             the single engine on the same micro-batches (torchgpipe's default checkpointing and none),
             DGL over PyG; a second table prints each goal's ratio and whether it is met
    first    exact k=8 and k=32 (single, GPipe) with the first layer's transform once per step and per
             micro-batch, side by side, over full batch (run it with microbatch.targets=all)
    accuracy_first
             test accuracy (best validation epoch) of the single engine at k=8, exact and historical
             halos, first transform once per step and per micro-batch, beside full batch (use --seeds)

With ``--seeds N`` every case runs with seeds 0..N-1 and the table shows means (test accuracy: at the
best validation epoch, with its sample standard deviation), plus each seed's accuracy.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from pipegnn import run
from pipegnn.config.schema import compose_config

FULL = ["engine=single", "chunks=1", "microbatch.halo=none"]
SUITES = {
    "core": {"full batch (single, k=1)": FULL,
             "gpipe k=8 exact metis": ["engine=gpipe", "chunks=8", "microbatch.halo=exact"],
             "single k=8 exact metis": ["engine=single", "chunks=8", "microbatch.halo=exact"],
             "gpipe k=8 naive metis": ["engine=gpipe", "chunks=8", "microbatch.halo=none"],
             "gpipe k=8 naive sequential": ["engine=gpipe", "chunks=8", "microbatch.halo=none",
                                            "microbatch.partition=sequential"]},
    "halo": {"full batch (single, k=1)": FULL,
             **{f"gpipe k=8 {h}": ["engine=gpipe", "chunks=8", f"microbatch.halo={h}"]
                for h in ("none", "exact", "historical")}},
    "chunks": {"full batch (single, k=1)": FULL,
               **{f"gpipe k={k} exact": ["engine=gpipe", f"chunks={k}"] for k in (1, 2, 4, 8, 16, 32)}},
    "accuracy": {"full batch (single, k=1)": FULL,
                 "gpipe k=8 exact metis": ["engine=gpipe", "chunks=8", "microbatch.halo=exact"],
                 "gpipe k=8 naive sequential": ["engine=gpipe", "chunks=8", "microbatch.halo=none",
                                                "microbatch.partition=sequential"]},
    "engines": {"full batch (single, k=1)": FULL,
                **{f"{fw} {engine} k={k}": [f"framework={fw}", f"engine={engine}", f"chunks={k}"]
                   for fw in ("pyg", "dgl") for engine in ("single", "gpipe", "pipelining")
                   for k in (1, 4, 8)}},
    "goals": {"pyg full batch (single, k=1)": FULL,
              "pyg gpipe k=8 exact metis": ["engine=gpipe", "chunks=8", "microbatch.halo=exact"],
              "pyg gpipe k=32 exact metis": ["engine=gpipe", "chunks=32", "microbatch.halo=exact"],
              "pyg single k=8 exact metis": ["engine=single", "chunks=8", "microbatch.halo=exact"],
              "pyg gpipe k=8 exact metis, no checkpointing": ["engine=gpipe", "chunks=8",
                                                              "microbatch.halo=exact",
                                                              "engine.checkpoint=never"],
              "dgl full batch (single, k=1)": ["framework=dgl", *FULL],
              "dgl gpipe k=8 exact metis": ["framework=dgl", "engine=gpipe", "chunks=8",
                                            "microbatch.halo=exact"]},
    "first": {"full batch (single, k=1)": FULL,
              **{f"{engine} k={k} exact, first transform {first}": [
                  f"engine={engine}", f"chunks={k}", "microbatch.halo=exact",
                  f"microbatch.first_transform={first}"]
                 for k in (8, 32) for engine in ("single", "gpipe")
                 for first in ("per_micro_batch", "once_per_step")}},
    "accuracy_first": {"full batch (single, k=1)": FULL,
                       **{f"single k=8 {halo}, first transform {first}": [
                           "engine=single", "chunks=8", f"microbatch.halo={halo}",
                           f"microbatch.first_transform={first}"]
                          for halo in ("exact", "historical")
                          for first in ("per_micro_batch", "once_per_step")}},
}
#: Per suite: (comparison, case, reference case, goal or None): the ratio of the two cases' epoch times.
GOALS = {"goals": [
    ("exact k=8 / full batch", "pyg gpipe k=8 exact metis", "pyg full batch (single, k=1)", 1.0),
    ("exact k=32 / full batch", "pyg gpipe k=32 exact metis", "pyg full batch (single, k=1)", 1.5),
    ("gpipe / single, same micro-batches", "pyg gpipe k=8 exact metis", "pyg single k=8 exact metis", 1.10),
    ("gpipe without checkpointing / single", "pyg gpipe k=8 exact metis, no checkpointing",
     "pyg single k=8 exact metis", 1.10),
    ("dgl / pyg, full batch", "dgl full batch (single, k=1)", "pyg full batch (single, k=1)", None),
    ("dgl / pyg, gpipe k=8 exact", "dgl gpipe k=8 exact metis", "pyg gpipe k=8 exact metis", None)],
    "first": [(f"{engine} exact k={k} / full batch, first transform {first}",
               f"{engine} k={k} exact, first transform {first}", "full batch (single, k=1)", None)
              for k in (8, 32) for engine in ("single", "gpipe")
              for first in ("per_micro_batch", "once_per_step")]}


def goal_table(table: pd.DataFrame, goals: list[tuple]) -> pd.DataFrame:
    """Each goal's epoch-time ratio (case / reference case), the goal and whether it is met."""
    epoch = table.set_index("case")["epoch_s"]
    rows = [{"comparison": name, "ratio": epoch[case] / epoch[ref],
             "goal": "-" if goal is None else f"<= {goal:.2f}",
             "met": "-" if goal is None else "yes" if epoch[case] / epoch[ref] <= goal else "no"}
            for name, case, ref, goal in goals]
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="core")
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 per case (means shown)")
    parser.add_argument("--csv", type=Path, help="write the table as CSV")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every case")
    args = parser.parse_args(argv)
    rows = []
    for name, case in SUITES[args.suite].items():
        runs = []
        for seed in range(args.seeds):
            cfg = compose_config([f"dataset={args.dataset}", f"train.epochs={args.epochs}",
                                  f"train.seed={seed}", *case, *args.overrides])
            record = run(cfg)
            if record["status"] != "completed":
                print(f"{name}: {record['status']}: {record['error']}", file=sys.stderr)
                return 1
            mb = record["microbatch"]
            runs.append({"epoch_s": record["timing"]["epoch_time_median_s"],
                         "eval_s": record["timing"]["eval_time_median_s"],
                         "test_acc": record["final"]["test_acc_at_best_val"],
                         "inflation": mb["inflation"], "replication": mb["replication"],
                         "peak_rss_mb": record["memory"]["peak_rss_bytes"] / 2 ** 20,
                         "build_s": record["timing"]["microbatch_build_s"]})
        row = {"case": name, **pd.DataFrame(runs).mean().to_dict()}
        if args.seeds > 1:
            row["test_acc_std"] = pd.Series([r["test_acc"] for r in runs]).std()
            row["test_acc_per_seed"] = " ".join(f"{r['test_acc']:.3f}" for r in runs)
        rows.append(row)
    table = pd.DataFrame(rows)
    table.insert(2, "ratio", table.epoch_s / table.epoch_s.iloc[0])
    extra = f" ({' '.join(args.overrides)})" if args.overrides else ""
    print(f"\n{args.suite} suite on {args.dataset}{extra}, {args.epochs} epochs, {args.seeds} seed(s) "
          f"(ratio = median epoch time / first row's)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.suite in GOALS:
        goals = goal_table(table, GOALS[args.suite])
        print(f"\ngoals on {args.dataset}{extra}")
        print(goals.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
        if args.suite in GOALS:
            goals.to_csv(args.csv.with_name(f"{args.csv.stem}_goals.csv"), index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
