"""Edges on disk (``data.edges=disk``) against edges in memory, under one ``train.memory_limit_gb`` cap.

A synthetic graph (--nodes, avg degree --degree, --features features on disk) trains a 2-layer GCN with
sampled halos (fan-outs --fanouts, random partition, chunks=--chunks, single engine), each case in its own
process (``benchmarks/memory_case.py``: peak RSS split into setup and train). Four cases, in this order:

1. ``memory``: edges in memory, no cap but --safety-gb;
2. ``disk (writes)``: edges on disk, no cap but --safety-gb: writes the graph store (the computation
   graph's CSC: self-loops and GCN weights) into a temporary cache, once;
3. ``disk``: edges on disk under --cap-gb, reading the store case 2 wrote (its checksums verified);
4. ``memory`` under --cap-gb.

The store's files are written by a process that can hold the edges (case 2), and the capped run only
reads them: generating the synthetic graph's edge list still needs it in memory once per run (it is
dropped before the plans are built), so the cap must leave room for it, but not for the computation
graph, its CSR and the sampler's copy, which edges in memory keep. Epoch time is the median after a
warm-up epoch; the page cache holds the store's files (just written).

    python benchmarks/graph_store.py --nodes 2000000 --degree 20 --cap-gb 1.5 \
        | tee results/benchmarks/graph_store.txt
    python benchmarks/graph_store.py --nodes 3600000 --degree 50 --cap-gb 2 --safety-gb 20 \
        --csv results/benchmarks/graph_store_beyond_cap.csv microbatch.first_transform=per_micro_batch \
        | tee results/benchmarks/graph_store_beyond_cap.txt

The second: edge files larger than the cap. Exact evaluation of 1,560 nodes at degree 50 reads most of
the graph's feature rows; ``per_micro_batch`` reads them micro-batch by micro-batch instead of all at once.

writes ``results/benchmarks/graph_store.csv`` (one row per case) and prints disk / memory side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_case import ROOT, case  # noqa: E402
from memory_report import log_case, show  # noqa: E402


def _edges(record: Path) -> dict[str, Any]:
    """The run record's ``dataset.edges`` section (storage, path, bytes, cached), if it wrote one."""
    if not record.is_file():
        return {}
    edges = (json.loads(record.read_text()).get("dataset") or {}).get("edges") or {}
    return {"edge_file_mb": edges.get("file_bytes", 0) / 2**20 or None, "store_cached": edges.get("cached"),
            "computation_edges": edges.get("computation_edges")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2_000_000)
    parser.add_argument("--degree", type=float, default=20.0)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--cap-gb", type=float, default=1.5, help="train.memory_limit_gb of the capped cases")
    parser.add_argument("--safety-gb", type=float, default=12.0, help="the cap of the uncapped cases")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--csv", type=Path, default=ROOT / "results" / "benchmarks" / "graph_store.csv")
    parser.add_argument("overrides", nargs="*", help="config overrides for every case (e.g. "
                        "microbatch.first_transform=per_micro_batch)")
    args = parser.parse_args(argv)
    common = ["dataset=synthetic", f"dataset.num_nodes={args.nodes}", f"dataset.avg_degree={args.degree}",
              f"dataset.num_features={args.features}", "model=gcn", "engine=single", f"chunks={args.chunks}",
              "microbatch.halo=sampled", f"microbatch.fanouts=[{args.fanouts}]",
              "microbatch.partition=random", "data.features=disk", f"train.epochs={args.epochs}",
              *args.overrides]
    cases = [("memory", "memory", None), ("disk (writes)", "disk", None), ("disk", "disk", args.cap_gb),
             ("memory", "memory", args.cap_gb)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="pipegnn-graph-store-") as cache:
        os.environ["PIPEGNN_CACHE"] = cache  # the children's data.cache: the store outlives a case
        for label, edges, cap in cases:
            record = Path(cache) / f"record-{len(rows)}.json"
            sets = {} if cap is None else {"train.memory_limit_gb": cap}
            row = case([*common, f"data.edges={edges}"], sets, args.safety_gb, args.timeout, record)
            row = {"case": label, "storage": edges, "cap_gb": cap or args.safety_gb, **row, **_edges(record)}
            log_case(f"{label} cap {row['cap_gb']} GiB", row)
            rows.append(row)
    about = (f"2-layer GCN, {args.nodes} nodes, avg degree {args.degree}, {args.features} features on disk, "
             f"sampled halos [{args.fanouts}], random partition, chunks={args.chunks}, {args.epochs} epochs"
             + (f", {' '.join(args.overrides)}" if args.overrides else ""))
    show(f"data.edges memory vs disk: {about} (MiB; cap_gb = train.memory_limit_gb, RLIMIT_AS; epoch_s = "
         "median after a warm-up epoch)", rows,
         ["case", "storage", "cap_gb", "status", "epoch_s", "peak_mb", "setup_mb", "train_mb", "held_mb",
          "edges", "computation_edges", "edge_file_mb", "store_cached", "load_s", "build_s", "total_s",
          "error"], args.csv)
    first, capped = rows[0], rows[2]
    if first["status"] == capped["status"] == "completed":
        keys = ("peak_mb", "setup_mb", "train_mb", "held_mb", "epoch_s")
        print("\ndisk (capped) / memory (uncapped): " + ", ".join(
            f"{key} {capped[key] / first[key]:.3f}" for key in keys if first.get(key) and capped.get(key)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
