"""The poster's open question in small: can micro-batches train a graph larger than the largest whose
full-batch step fits one device?

On one device capped at ``--cap-gb`` GiB (``torch.cuda.set_per_process_memory_fraction``: the allocator
refuses beyond it, as a smaller card would), a 2-layer GAT on PubMed-shaped synthetic graphs
(``microbatch.targets=all``):

1. full batch (features on the device) on graphs of ``--start-nodes`` doubling until the first
   out-of-memory (or ``--max-nodes``): the largest that fits is N;
2. exact and historical micro-batches at k = 8 and 32 on graphs of N, 2N and 4N nodes, features read
   from the host per micro-batch (``data.features=disk``) and each micro-batch's first transform its own
   (``microbatch.first_transform=per_micro_batch``), each series stopping at its first out-of-memory.

Each row: status (``completed`` or ``oom``), median epoch time, time per node, peak device memory. Every
size runs under ``--size-timeout-s`` (a size whose generation and runs exceed it is not started again).

    python benchmarks/device_capacity.py --device cuda:0 --cap-gb 1 --csv OUT.csv     # on a GPU
    python benchmarks/device_capacity.py --device cpu --start-nodes 400 --max-nodes 800 # a dry run
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from pipegnn import run
from pipegnn.config.schema import compose_config

#: micro-batched case: overrides (the full batch is ``chunks=1 microbatch.halo=none``).
CASES = {f"{halo} k={k}": [f"chunks={k}", f"microbatch.halo={halo}", "data.features=disk",
                           "microbatch.first_transform=per_micro_batch"]
         for halo in ("exact", "historical") for k in (8, 32)}


def one(args: argparse.Namespace, nodes: int, case: str, overrides: list[str], cache: Path) -> dict:
    """One run of ``args.epochs`` epochs on a graph of ``nodes`` nodes: its row of the table."""
    cfg = compose_config(["engine=single", f"engine.device={args.device}", "model=gat", "model.dropout=0",
                          "microbatch.targets=all", "engine.timeline=false", f"train.epochs={args.epochs}",
                          "logger=[]", f"dataset.num_nodes={nodes}", f"cache_root={cache}", *overrides,
                          *args.overrides])
    record = run(cfg)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    epoch = record["timing"].get("epoch_time_median_s")
    peaks = (record.get("memory") or {}).get("peak_device_bytes") or {}
    row = {"nodes": nodes, "case": case, "status": record["status"], "epoch_s": epoch,
           "us_per_node": epoch / nodes * 1e6 if epoch else None,
           "peak_device_mib": max(peaks.values()) / 2**20 if peaks else None,
           "replication": record.get("microbatch", {}).get("inflation")}
    if record["status"] not in ("completed", "oom"):
        row["status"] = f"{record['status']}: {str(record['error'])[:80]}"
    print(row, file=sys.stderr, flush=True)
    return row


def measure(args: argparse.Namespace) -> pd.DataFrame:
    rows: list[dict] = []
    cache = args.cache
    nodes, fits = args.start_nodes, 0
    while nodes <= args.max_nodes:
        row = one(args, nodes, "full batch", ["chunks=1", "microbatch.halo=none"], cache)
        rows.append(row)
        if row["status"] != "completed":
            break
        fits, nodes = nodes, nodes * 2
    if not fits:
        return pd.DataFrame(rows)
    stopped: set[str] = set()
    for size in (fits, 2 * fits, 4 * fits):
        start = time.monotonic()
        for case, overrides in CASES.items():
            if case in stopped:
                continue
            if time.monotonic() - start > args.size_timeout_s:
                rows.append({"nodes": size, "case": case, "status": "not run: the size's time ran out"})
                continue
            row = one(args, size, case, overrides, cache)
            rows.append(row)
            if row["status"] != "completed":
                stopped.add(case)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--cap-gb", type=float, default=None,
                        help="device memory cap in GiB (a CUDA device only; default: the whole card)")
    parser.add_argument("--start-nodes", type=int, default=50_000)
    parser.add_argument("--max-nodes", type=int, default=8_000_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--size-timeout-s", type=float, default=60.0)
    parser.add_argument("--cache", type=Path, default=Path(".cache"),
                        help="cache_root for plans and features")
    parser.add_argument("--csv", type=Path)
    parser.add_argument("overrides", nargs="*", help="config overrides for every run")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.cap_gb is not None:
        if device.type != "cuda":
            parser.error("--cap-gb needs a CUDA device")
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gb * 2**30 / total), device)
    table = measure(args)
    cap = f"{args.cap_gb} GiB" if args.cap_gb is not None else "the whole device"
    print(f"device capacity ({args.device}, capped at {cap}): GAT 2 layers, PubMed-shaped synthetic graphs, "
          "targets=all; micro-batches read features from the host")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
