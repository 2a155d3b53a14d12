"""Sparse against dense node features (``data.features=sparse`` against ``memory``) on the study's
bag-of-words graphs: median epoch time (training step) and peak resident memory of a full-batch run, side
by side in one run, per graph and model (GCN, GAT; one thread, the study's per-class split).

    OMP_NUM_THREADS=1 python benchmarks/sparse_features.py --csv results/benchmarks/sparse_features.csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from pipegnn import run
from pipegnn.config.schema import compose_config

DATASETS = ("amazon_computers", "coauthor_physics")
MODELS = ("gcn", "gat")


def measure(args: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for dataset in args.datasets:
        for model in args.models:
            row: dict = {"dataset": dataset, "model": model}
            for storage in ("memory", "sparse"):
                record = run(compose_config([
                    f"dataset={dataset}", f"model={model}", "engine=single", "chunks=1",
                    "microbatch.halo=none", f"train.epochs={args.epochs}", "logger=[]",
                    f"data.features={storage}", "engine.timeline=false"]))
                assert record["status"] == "completed", record["error"]
                row[f"{storage}_epoch_s"] = record["timing"]["epoch_time_median_s"]
                row[f"{storage}_peak_rss_mib"] = record["memory"]["peak_rss_bytes"] / 2**20
                row[f"{storage}_feature_mib"] = record["dataset"]["feature_bytes"] / 2**20
            row["time_ratio"] = row["sparse_epoch_s"] / row["memory_epoch_s"]
            row["memory_ratio"] = row["sparse_peak_rss_mib"] / row["memory_peak_rss_mib"]
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--epochs", type=int, default=5, help="epochs per run (the first is a warm-up)")
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    table = measure(args)
    print("full batch, one thread: median epoch (s) and peak RSS (MiB), dense (memory) and sparse features; "
          "ratios sparse / dense")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
        text = table.to_string(index=False, float_format=lambda v: f"{v:.4g}")
        args.csv.with_suffix(".txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
