"""Memory of building a micro-batch plan on a large graph, in copies of the edge list.

    python benchmarks/plan_memory.py --nodes 2000000 --avg-degree 10 --chunks 8 --partition random

Generates a synthetic graph (8 features: only the topology matters here), then builds the exact plan
over all nodes and reports the peak resident memory the build added (Linux VmHWM, reset before the
build) next to the size of the graph's edge list ``[2, E]`` int64, and the size of the plan itself.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pipegnn.backends import get_backend
from pipegnn.data import SyntheticSpec, make_synthetic
from pipegnn.measure import peak_rss_bytes, reset_peaks
from pipegnn.microbatch import ComputationGraph, PlanSpec, build_plan

_STATUS = Path("/proc/self/status")


def rss_bytes() -> int:
    """Current resident set size (VmRSS)."""
    for line in _STATUS.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found: this benchmark needs Linux /proc")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2_000_000)
    parser.add_argument("--avg-degree", type=float, default=10.0)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--halo", default="exact")
    parser.add_argument("--partition", default="random")
    parser.add_argument("--model", default="gat",
                        help="computation graph: gat (self-loops), gcn (normalised) or sage (no self-loops)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    graph = make_synthetic(SyntheticSpec(num_nodes=args.nodes, avg_degree=args.avg_degree,
                                         num_features=8, num_communities=max(30, args.nodes // 2000)))
    edges, weight = get_backend("pyg").computation_graph(args.model, graph.edge_index, graph.num_nodes)
    print(f"{graph.num_nodes} nodes, {edges.size(1)} edges in the computation graph "
          f"(generated in {time.perf_counter() - start:.1f}s)")
    edge_list = edges.numel() * edges.element_size()
    reset_peaks()
    before = rss_bytes()
    start = time.perf_counter()
    plan = build_plan(ComputationGraph(edges, graph.num_nodes, weight), graph.split("all"),
                      PlanSpec(args.chunks, args.layers, halo=args.halo, partitioner=args.partition))
    seconds = time.perf_counter() - start
    peak = peak_rss_bytes() - before
    kept = rss_bytes() - before
    print(f"plan: {args.chunks} chunks, halo={args.halo}, partition={args.partition}, "
          f"{args.layers} layers, built in {seconds:.1f}s, inflation {plan.stats.inflation:.2f}")
    print(f"edge list [2, E] int64: {edge_list / 2**20:8.0f} MiB")
    print(f"peak added by the build: {peak / 2**20:8.0f} MiB = {peak / edge_list:.2f} edge lists")
    print(f"kept after (the plan):   {kept / 2**20:8.0f} MiB = {kept / edge_list:.2f} edge lists")
    print(f"transient (peak - kept): {(peak - kept) / 2**20:8.0f} MiB = "
          f"{(peak - kept) / edge_list:.2f} edge lists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
