"""Capacity: how deep a model, and how large a graph, trains when each stage has a device's memory.

GPipe's argument for pipelines is capacity (a model too large for one accelerator trains on several).
Here every pipeline stage is a process capped as a device would be (``engine.memory_limit_gb``, default
2 GiB each: what it may allocate while training, beyond its set-up footprint). For GCNII and residual
GCN, exact and historical halos, on 1, 2 and 4 stages (``engine=pipelining``, GPipe, k micro-batches,
``microbatch.targets=all``): the deepest model that trains one epoch, found by doubling the depth from
``--start`` and bisecting to 1/8 of it (``--what layers``); and (``--what nodes``) the largest synthetic
graph (nodes, doubling then bisecting to 1/8) that trains at ``--graph-depth`` layers. Beside each:
the peak RSS of every rank in the deepest (largest) run that trained, and what stopped the search
(``oom``, or ``diverged``: a loss that is not finite, which deep residual stacks reach before their
memory runs out).

    OMP_NUM_THREADS=1 python benchmarks/capacity.py --csv results/benchmarks/capacity.csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pipegnn import run  # noqa: E402
from pipegnn.config.schema import compose_config  # noqa: E402

#: model name in the table: overrides.
MODELS = {"gcn2": ["model=gcn2"], "residual_gcn": ["model=gcn", "model.residual=true"]}


def probe(args: argparse.Namespace, overrides: list[str]) -> dict:
    """One run of one epoch under the per-stage cap: its status and, if it trained, each rank's peak."""
    cfg = compose_config(["engine=pipelining", "engine.schedule=gpipe",
                          f"engine.memory_limit_gb={args.cap_gb}", "engine.timeline=false", "train.epochs=1",
                          "microbatch.targets=all", f"model.hidden={args.hidden}", f"chunks={args.chunks}",
                          "microbatch.cache=null", *overrides, *args.overrides])
    record = run(cfg)
    peaks = record.get("memory", {}).get("peak_rss_bytes_per_rank") or []
    if record["status"] not in ("completed", "oom"):
        print(f"  {overrides}: {record['status']}: {record['error']}", file=sys.stderr, flush=True)
    print(f"  {' '.join(overrides)}: {record['status']}", file=sys.stderr, flush=True)
    status = record["status"]
    if status == "failed" and "loss is nan" in str(record["error"]):
        status = "diverged"  # the depth, not the memory, stopped it
    return {"fits": status == "completed", "status": status,
            "peak_mb_per_rank": " ".join(f"{p / 2**20:.0f}" for p in peaks)}


def largest(fits: Callable[[int], dict], start: int,
            resolution: Callable[[int], int]) -> tuple[int, dict, dict]:
    """The largest ``n`` for which ``fits(n)["fits"]`` (doubling from ``start``, then bisecting until the
    gap is below ``resolution(n)``), its probe's result, and the result of the smallest ``n`` that did
    not fit (what stopped the search: ``oom``, or another failure such as a diverging loss);
    ``(0, {}, first)`` when even ``start`` does not fit."""
    lo, hi, best, stop = 0, None, {}, {}
    n = start
    while hi is None:
        result = fits(n)
        if result["fits"]:
            lo, best, n = n, result, 2 * n
        else:
            hi, stop = n, result
    while lo and hi - lo > resolution(lo):
        mid = (lo + hi) // 2
        result = fits(mid)
        if result["fits"]:
            lo, best = mid, result
        else:
            hi, stop = mid, result
    return lo, best, stop


def measure(args: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for model in args.models:
        for halo in args.halos:
            for stages in args.stages:
                devices = ",".join(["cpu"] * stages)
                setting = [*MODELS[model], f"microbatch.halo={halo}", f"engine.devices=[{devices}]"]
                print(f"{model} {halo} {stages} stage(s)", file=sys.stderr, flush=True)
                row = {"model": model, "halo": halo, "stages": stages}
                # Each probe binds this iteration's setting as a default (largest calls it in this iteration).
                if "layers" in args.what:
                    depth, at, stop = largest(
                        lambda n, setting=setting: probe(args, [*setting, f"model.layers={n}"]),
                        args.start, lambda n: max(1, n // 8))
                    rows.append({**row, "what": "layers", "largest": depth,
                                 "peak_mb_per_rank": at.get("peak_mb_per_rank"),
                                 "stopped_by": stop.get("status")})
                if "nodes" in args.what:
                    at_depth = [*setting, f"model.layers={args.graph_depth}"]
                    nodes, at, stop = largest(
                        lambda n, at_depth=at_depth: probe(args, [*at_depth, f"dataset.num_nodes={n}"]),
                        args.start_nodes, lambda n: max(1, n // 8))
                    rows.append({**row, "what": f"nodes at {args.graph_depth} layers", "largest": nodes,
                                 "peak_mb_per_rank": at.get("peak_mb_per_rank"),
                                 "stopped_by": stop.get("status")})
    return pd.DataFrame(rows)


def figure(table: pd.DataFrame, path: Path, cap_gb: float) -> None:
    whats = list(dict.fromkeys(table.what))
    fig, axes = plt.subplots(1, len(whats), figsize=(5 * len(whats), 4), squeeze=False)
    for ax, what in zip(axes[0], whats):
        for (model, halo), group in table[table.what == what].groupby(["model", "halo"]):
            ax.plot(group.stages, group.largest, marker="o", label=f"{model}, {halo}")
        ax.set_xticks(sorted(table.stages.unique()))
        ax.set_xlabel(f"pipeline stages ({cap_gb:g} GiB each)")
        ax.set_ylabel(f"largest that trains ({what})")
        ax.legend(fontsize=8)
    fig.suptitle("Capacity: what 1, 2 and 4 capped stages can train")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--halos", nargs="+", default=["exact", "historical"])
    parser.add_argument("--stages", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cap-gb", type=float, default=2.0, help="memory of each stage process (GiB)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--start", type=int, default=2, help="first depth tried (then doubled)")
    parser.add_argument("--what", nargs="+", default=["layers"], choices=["layers", "nodes"],
                        help="search the deepest model (layers) and/or the largest graph at --graph-depth "
                             "(nodes)")
    parser.add_argument("--graph-depth", type=int, default=16, help="the depth of the largest-graph search")
    parser.add_argument("--start-nodes", type=int, default=8192)
    parser.add_argument("--csv", type=Path, help="write the table here and the figure beside it (.png)")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every probe")
    args = parser.parse_args(argv)
    table = measure(args)
    print(f"\nlargest that trains one epoch with {args.cap_gb:g} GiB per stage process "
          f"(GPipe, k={args.chunks}, hidden {args.hidden}, targets=all; peak RSS per rank of that run, MiB)")
    print(table.to_string(index=False))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
        figure(table, args.csv.with_suffix(".png"), args.cap_gb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
