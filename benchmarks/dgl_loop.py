"""Where an epoch of DGL's own loop (``map_runner=dgl_loader``: ``DataLoader`` with ``NeighborSampler``,
GCN of ``GraphConv`` layers, an optimiser step per batch) goes, part by part, on the map's settings (a
dense split, the study's GCN, fan-outs [10,10], 8 batches), with the two dropouts side by side: torch's
``F.dropout`` of each batch's input rows, which the loop runs (its mask from ``bernoulli_``), and
pipegnn's (``pipegnn.dropout``: the same distribution from uniform numbers), on the same rows in the same
epoch. What the loop's epoch would cost with pipegnn's dropout is its epoch less the one plus the other.

    python benchmarks/dgl_loop.py --csv results/benchmarks/dgl_loop.csv | tee results/benchmarks/dgl_loop.txt
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

#: The map's datasets (conf/dataset/*_dense.yaml).
DATASETS = ("amazon_computers_dense", "coauthor_physics_dense")


def _epoch(dataset: str, threads: int, seed: int) -> dict:
    """One epoch of DGL's loop on ``dataset``, each part summed over its batches."""
    import dgl
    import torch
    import torch.nn.functional as F

    from pipegnn.config.schema import compose_config
    from pipegnn.config.typed import run_config
    from pipegnn.data import load_graph
    from pipegnn.dropout import dropout
    from pipegnn.training.dgl_loader import LoopModel, dgl_loop

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    dgl.seed(seed)  # the loader's shuffle and the sampler's draws
    cfg = run_config(compose_config(["experiment=sampled_map", f"dataset={dataset}", "model=gcn",
                                     "map_setting=sampled10_k8", "map_runner=dgl_loader",
                                     f"train.seed={seed}"]))
    graph = load_graph(cfg.dataset, cfg.data.root, cfg.data.cache)
    assert graph.x is not None
    _, loader = dgl_loop(cfg, graph)
    x, y = graph.x.float(), graph.y
    model = LoopModel(cfg, x.size(1), graph.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    p = cfg.model.dropout
    names = ("draw_s", "gather_s", "torch_dropout_s", "pipegnn_dropout_s", "step_s")
    for _ in range(2):  # the second epoch's figures are kept: the first warms up
        parts = dict.fromkeys(names, 0.0)
        rows = 0
        batches = iter(loader)
        while True:
            start = time.perf_counter()
            got = next(batches, None)
            parts["draw_s"] += time.perf_counter() - start
            if got is None:
                break
            input_nodes, output_nodes, blocks = got
            start = time.perf_counter()
            h = x[input_nodes]
            parts["gather_s"] += time.perf_counter() - start
            rows += input_nodes.numel()
            for name, drop in (("torch_dropout_s", F.dropout), ("pipegnn_dropout_s", dropout)):
                start = time.perf_counter()
                drop(h, p, True)
                parts[name] += time.perf_counter() - start
            start = time.perf_counter()  # the loop's step as train_loader runs it (torch's dropout inside)
            loss = F.cross_entropy(model(blocks, h), y[output_nodes])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            parts["step_s"] += time.perf_counter() - start
    epoch = parts["draw_s"] + parts["gather_s"] + parts["step_s"]
    return {"dataset": dataset, "threads": threads, "features": x.size(1), "batches": len(loader),
            "input_rows_per_epoch": rows, **parts, "epoch_s": epoch,
            "epoch_with_pipegnn_dropout_s": epoch - parts["torch_dropout_s"] + parts["pipegnn_dropout_s"],
            "torch_dropout_share": parts["torch_dropout_s"] / epoch}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads (the map's runs: 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("PIPEGNN_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    frame = pd.DataFrame([_epoch(d, args.threads, args.seed) for d in args.datasets])
    print(f"one epoch of DGL's loop (after an untimed one), {args.threads} threads, seed {args.seed}; "
          "seconds summed over its batches; torch's and pipegnn's dropout of the same input rows")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.csv is not None:
        frame.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
