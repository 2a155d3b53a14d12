"""Partition and halo statistics side by side, without training.

    python benchmarks/partitions.py dataset=cora chunks=2,4,8,16,32 model.layers=2,3 \
        microbatch.targets=all [microbatch.halo=exact,historical] [microbatch.partition=...] [--csv out.csv]

Arguments are the training config's overrides (see ``conf/``); ``chunks``, ``model.layers``,
``microbatch.halo`` and ``microbatch.partition`` take comma-separated lists, and every combination gets
one row (default: every partitioner, exact halo). Plans are built fresh (the plan cache is bypassed) so
``build_s`` is the real build time.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from omegaconf import OmegaConf

from pipegnn.backends import get_backend
from pipegnn.config.schema import compose_config
from pipegnn.data import Graph, load_graph
from pipegnn.errors import ConfigError, check_choice
from pipegnn.microbatch.halo import HALOS
from pipegnn.microbatch.partition import PARTITIONERS
from pipegnn.microbatch.plan import ComputationGraph, PlanSpec, build_plan

__all__ = ["main", "plan_table"]

_LISTS = {"chunks": "chunks", "model.layers": "layers", "microbatch.halo": "halo",
          "microbatch.partition": "partition"}


def plan_table(graph: Graph, kind: str, framework: str, targets: str, chunks: Sequence[int],
               layers: Sequence[int], halos: Sequence[str], partitions: Sequence[str],
               seed: int = 0) -> pd.DataFrame:
    """One row of plan statistics per (partition, chunks, layers, halo) combination.

    Args:
        graph: the graph.
        kind: model kind (its computation graph: GAT self-loops, GCN normalisation weights).
        framework: framework adapter that builds the computation graph.
        targets: ``train`` or ``all``.
        chunks, layers, halos, partitions: the values to combine.
        seed: partitioner seed.
    """
    edge_index, weight = get_backend(framework).computation_graph(kind, graph.edge_index,
                                                                  graph.num_nodes)
    computation = ComputationGraph(edge_index, graph.num_nodes, weight)
    target_ids = graph.split(targets)
    rows: list[dict[str, Any]] = []
    for partition, k, num_layers, halo in itertools.product(partitions, chunks, layers, halos):
        start = time.perf_counter()
        plan = build_plan(computation, target_ids,
                          PlanSpec(k, num_layers, halo=halo, partitioner=partition, seed=seed))
        s = plan.stats
        rows.append({"partition": partition, "chunks": k, "layers": num_layers, "halo": halo,
                     "replication": s.replication,
                     "replication_per_layer": " ".join(f"{r:.2f}" for r in s.replication_per_layer),
                     "inflation": s.inflation, "inflation_per_micro_batch": s.inflation_per_micro_batch,
                     "cut_edge_fraction": s.cut_edge_fraction,
                     "target_balance": s.target_balance, "node_balance": s.node_balance,
                     "padding_fraction": s.padding_fraction, "max_nodes": max(s.nodes_per_chunk),
                     "build_s": time.perf_counter() - start})
    return pd.DataFrame(rows)


def _split_lists(overrides: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    plain, lists = [], {}
    for o in overrides:
        key, _, value = o.partition("=")
        if key in _LISTS:
            lists[_LISTS[key]] = [v for v in value.split(",") if v]
        else:
            plain.append(o)
    return plain, lists


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python benchmarks/partitions.py",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. dataset=cora chunks=2,4,8")
    parser.add_argument("--csv", type=Path, help="also write the table as CSV")
    args = parser.parse_args(argv)
    plain, lists = _split_lists(args.overrides)
    try:
        cfg = OmegaConf.to_container(compose_config(plain), resolve=True)
        chunks = [int(c) for c in lists.get("chunks", [cfg["chunks"]])]
        layers = [int(n) for n in lists.get("layers", [cfg["model"]["layers"]])]
        halos = lists.get("halo", ["exact"])
        partitions = lists.get("partition", list(PARTITIONERS))
        for value, valid, key in [(h, HALOS, "microbatch.halo") for h in halos] + \
                                 [(p, PARTITIONERS, "microbatch.partition") for p in partitions]:
            check_choice(value, valid, key)
        graph = load_graph(cfg["dataset"], cfg["data"]["root"], cfg["data"]["cache"])
        table = plan_table(graph, cfg["model"]["name"], cfg["framework"]["name"],
                           cfg["microbatch"]["targets"], chunks, layers, halos, partitions,
                           seed=int(cfg["microbatch"]["seed"]))
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{graph}; model={cfg['model']['name']} targets={cfg['microbatch']['targets']}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.csv:
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
