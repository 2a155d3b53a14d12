"""The host's neighbour draw, pipegnn's against DGL's, side by side in one run: sampled edges per second
of one epoch's draw (the training targets of a dense split in k METIS groups, every group drawn), for
pipegnn's ``NeighbourSampler.draw`` and DGL 1.1.3's ``MultiLayerNeighborSampler.sample_blocks`` (its
fused CPU kernel, the sampler DGL's ``DataLoader`` runs), on the same computation graph (GCN's: one
self-loop per node, which pipegnn always keeps and DGL draws as a neighbour), the same targets and the
same fan-outs; at 1 and 2 threads (``OMP_NUM_THREADS``), each thread count in a fresh process. Beside the
times, each draw's minor page faults (``getrusage``): memory that glibc's heap returned to the system
after one draw and maps anew, zeroed, in the next, a cost that depends on the process's heap (a fresh
process here; ``MALLOC_TOP_PAD_`` in the environment, which the children inherit, keeps the heap).

Both draws end with every block's edge weights in hand, as a training step reads them: pipegnn's draw
gathers (and scales) its blocks' weights, while DGL gathers a block's edge feature the first time it is
read (measured: 1.6-2.4 ms of a 15.5 ms draw, Amazon Computers, [25,10], one thread), so the benchmark
reads ``edata["w"]`` of DGL's blocks inside the timed draw.

Each library counts the edges of its own blocks; the two draw the same fan-outs from the same rows, so
their counts agree to within the self-loops. A figure is the median of ``--repeats`` epochs drawn
alternately by the two libraries, each timed right after an untimed draw of its own: DGL's OpenMP
threads spin on after its draw, and a draw timed right after it was measured 1.5x slower on two cores
(Coauthor Physics, [10,10], pipegnn's two workers: 33 ms against 22 ms alone), a cost of the
alternation, not of either library. pipegnn draws with as many workers as the process has threads
(``NeighbourSampler.draw``).

    python benchmarks/sampler.py --csv results/benchmarks/sampler.csv | tee results/benchmarks/sampler.txt
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

#: dataset preset: what ``load_graph`` is given (the map's dense splits: 60/20/20 of every node).
DATASETS = {"amazon_computers": {"name": "amazon_computers", "split": "random"},
            "coauthor_physics": {"name": "coauthor_physics", "split": "random"}}
#: fan-outs, in hop order from the targets (pipegnn's ``microbatch.fanouts``, PyG's ``num_neighbors``).
FANOUTS = ([10, 10], [25, 10])


def _measure(dataset: str, fanouts: list[list[int]], chunks: int, repeats: int) -> list[dict]:
    """One process's rows: every fan-out on ``dataset`` at this process's thread count."""
    import dgl
    import torch

    from pipegnn.backends.pyg import PygBackend
    from pipegnn.data import load_graph
    from pipegnn.microbatch.halo import InCSR
    from pipegnn.microbatch.partition import partition
    from pipegnn.microbatch.sample import NeighbourSampler

    root = os.environ.get("PIPEGNN_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    graph = load_graph(DATASETS[dataset], root, os.environ.get("PIPEGNN_CACHE", ".cache/datasets"))
    edge_index, weight = PygBackend.computation_graph("gcn", graph.edge_index, graph.num_nodes)
    csr = InCSR(edge_index, graph.num_nodes, weight)
    targets = graph.split("train")
    part = partition(graph.edge_index, graph.num_nodes, targets, chunks, "metis")
    groups = [targets[part[targets] == p] for p in range(chunks)]
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=graph.num_nodes)
    g.edata["w"] = weight  # carried along, as pipegnn's blocks carry theirs
    rows = []
    for fanout in fanouts:
        ours = NeighbourSampler(csr, groups, fanout, seed=0)
        # DGL's fan-outs are per layer from the input: the reverse of hop order
        theirs = dgl.dataloading.MultiLayerNeighborSampler(list(reversed(fanout)))

        def pipegnn_draw(epoch: int, ours: NeighbourSampler = ours) -> int:
            return sum(e.size(1) for mb in ours.draw(epoch) for e in mb.edges)

        def dgl_draw(epoch: int, theirs: dgl.dataloading.Sampler = theirs) -> int:
            # each block's weights read, as its training reads them: DGL gathers an edge feature only
            # when it is first read, pipegnn's draw gathers and scales its blocks' weights
            return sum(b.edata["w"].numel() for seeds in groups for b in theirs.sample_blocks(g, seeds)[2])

        draws = {"pipegnn": pipegnn_draw, "dgl": dgl_draw}
        times: dict[str, list[float]] = {name: [] for name in draws}
        faults: dict[str, list[int]] = {name: [] for name in draws}
        edges: dict[str, int] = {}
        for epoch in range(repeats + 1):  # the first epoch of each warms up
            for name, draw in draws.items():
                draw(epoch)  # after the other library's draw: its threads may still be spinning
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter()
                edges[name] = draw(epoch)
                if epoch:
                    times[name].append(time.perf_counter() - start)
                    faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        for name in draws:
            seconds = statistics.median(times[name])
            rows.append({"dataset": dataset, "fanouts": str(fanout), "threads": torch.get_num_threads(),
                         "library": name, "draw_s": seconds, "edges": edges[name],
                         "medges_per_s": edges[name] / seconds / 1e6,
                         "page_faults": statistics.median(faults[name])})
    return rows


def table(rows: list[dict]) -> pd.DataFrame:
    """Per dataset, fan-outs and threads: both libraries' throughput and pipegnn's over DGL's."""
    frame = pd.DataFrame(rows)
    wide = frame.pivot_table(index=["dataset", "fanouts", "threads"], columns="library",
                             values=["draw_s", "edges", "medges_per_s", "page_faults"], aggfunc="first")
    wide.columns = [f"{library}_{value}" for value, library in wide.columns]
    wide["ratio"] = wide["pipegnn_medges_per_s"] / wide["dgl_medges_per_s"]
    return wide.reset_index()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--fanouts", nargs="+", default=[",".join(map(str, f)) for f in FANOUTS],
                        help="comma-separated, hop order from the targets, e.g. 10,10 25,10")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--csv", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    fanouts = [[int(f) for f in spec.split(",")] for spec in args.fanouts]
    if args.child:  # one thread count, every dataset; rows as JSON on the last line
        rows = [r for d in args.datasets for r in _measure(d, fanouts, args.chunks, args.repeats)]
        print(json.dumps(rows))
        return 0
    rows = []
    for threads in args.threads:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "DGLBACKEND": "pytorch"}
        command = [sys.executable, __file__, "--child", "--datasets", *args.datasets, "--fanouts",
                   *args.fanouts, "--chunks", str(args.chunks), "--repeats", str(args.repeats)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{threads} thread(s): {done.stderr.strip().splitlines()[-1:]}")
        rows.extend(json.loads(done.stdout.strip().splitlines()[-1]))
    wide = table(rows)
    print(f"one epoch's draw: the training targets (60% of the nodes) in {args.chunks} METIS groups; median "
          f"of {args.repeats} epochs; M sampled edges/s (each library's own blocks' edges); page faults: the "
          "process's minor faults during a draw (memory the heap maps anew)")
    print(wide.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.csv is not None:
        wide.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
