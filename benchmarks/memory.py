"""Peak memory of micro-batched training: what full-batch training cannot fit, sparse aggregation, bf16.

Every case runs in its own subprocess calling ``pipegnn.run``, so each peak resident set size (Linux
VmHWM) is that case's alone; the child splits the peak into *setup* and *train* and notes the resident
memory before the run (``base``) and when training starts (``held``): ``benchmarks/memory_case.py``.
Every child runs under ``train.memory_limit_gb`` (``--safety-gb`` unless the part sets its own cap), so a
case that outgrows it is an ``oom`` row instead of a visit from the OOM killer. The tables, the side by
side ratios and part f's figure: ``benchmarks/memory_report.py``.

    python benchmarks/memory.py --part a                       # chunks=16 vs 1, GAT, 300K nodes
    python benchmarks/memory.py --part b --cap-gb 3            # largest graph under a 3 GiB cap
    python benchmarks/memory.py --part c                       # sparse vs messages aggregation (GCN)
    python benchmarks/memory.py --part a --nodes 100000 --epochs 1   # smaller, quicker
    python benchmarks/memory.py --part b --cap-gb 3 --community-size 2000 --tag _local dataset.homophily=0.95
    python benchmarks/memory.py --part a --halo historical --tag _historical
    python benchmarks/memory.py --part d                       # train.precision fp32 vs bf16
    python benchmarks/memory.py --part e                       # data.features disk vs memory
    # the largest graph under a cap, features on disk:
    python benchmarks/memory.py --part f --cap-gb 3 --epochs 2 --chunks 16 --f-targets train
    python benchmarks/memory.py --part f --cap-gb 3 --epochs 2 --f-targets all --f-max-nodes 400000 --tag _all

Parts:
    a   peak(chunks=16) / peak(chunks=1) for a 2-layer GAT with targets=all, --halo halos (exact), METIS,
        engines single and gpipe, on a synthetic graph (--nodes 300000, avg degree 10, 128 features).
    b   doubling search on num_nodes (from --start-nodes) for the largest synthetic graph (avg degree
        10, 128 features, 2-layer GAT, targets=all) that trains under --cap-gb, full batch vs
        chunks=--chunks (--halo, METIS, --engine; its search starts at full batch's largest size);
        then one bisection step between the last fit and the first failure.
    c   peak memory of GCN full batch with aggregation messages vs sparse (PyG) and DGL (both values,
        which run the same fused kernels), on a dense-ish synthetic graph (--c-nodes, --c-degree), for
        hidden sizes --c-hidden.
    d   train.precision=bf16 vs fp32 at the same graph and chunks: peak memory and epoch time (median
        after a warm-up epoch, --d-epochs) of a 2-layer GAT with targets=all on a synthetic graph with
        wide features (--d-nodes 100000, avg degree 10, --d-features 512, so that the features weigh),
        full batch (single engine) and exact chunks=16 (METIS) per engine of --engines; a second table
        puts the bf16 / fp32 ratios side by side (memory_d_ratios.csv).
    e   data.features disk vs memory on a graph that fits both ways (--e-nodes, --e-features, avg
        degree 10, 2-layer GAT, targets=all): full batch in memory, then chunks=--chunks exact METIS
        micro-batches per engine and first_transform (per_micro_batch, once_per_step), memory against
        disk; epoch time (the feature file was just written: a warm page cache), peak memory and the
        bytes and read calls of a training step; disk / memory side by side.
    f   the largest synthetic graph with --f-features features per node (avg degree --f-degree) that a
        2-layer GAT trains on under --cap-gb, by doubling from --start-nodes up to --f-max-nodes: full
        batch with the features in memory against exact METIS micro-batches (chunks=--chunks, single
        engine, first transform per micro-batch) with the features on disk, for each of --f-targets:
        train (what the loss reads: the graph's PubMed-like split, 60 training nodes, so --chunks <= 60)
        and all (every node's output). Each case writes its feature files
        into a temporary cache, removed afterwards, and its record into memory_f<tag>_records/; the
        figure is memory_f<tag>.png.

Tables print side by side with ratios; CSVs go to results/benchmarks/memory_<part>.csv.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# Siblings: one case's measurement in its own process, and the tables and figure (case, side_by_side and
# plot_f are reached through this module too).
from memory_case import EXTRA, ROOT, case  # noqa: E402
from memory_report import log_case, plot_f, show, side_by_side  # noqa: E402

OUT = ROOT / "results" / "benchmarks"
GAT_GRAPH = ["dataset.avg_degree=10", "dataset.num_features=128"]
# Every micro-batch transforms its own first-layer rows here, the memory-lean path: the default
# once-per-step transform keeps every row's dropped-out features, the shared transformed rows and their
# gradient for the whole step (memory_a_once.csv: `--tag _once microbatch.first_transform=once_per_step`).
METIS_ALL = ["microbatch.partition=metis", "microbatch.targets=all",
             "microbatch.first_transform=per_micro_batch"]
FULL = ["chunks=1", "microbatch.halo=none", "microbatch.targets=all"]
# 2-layer GAT with its default 8 heads x 8 hidden; dropout stays on (it does not change the shapes).
GAT = ["model=gat", "model.layers=2"]
PRECISIONS = ("fp32", "bf16")  # part d: train.precision


def _graph(nodes: int, args: argparse.Namespace) -> list[str]:
    """Synthetic graph of ``nodes`` nodes (avg degree 10, 128 features; with --community-size, one
    community per that many nodes, so locality does not change with the size)."""
    size = [f"dataset.num_communities={max(1, nodes // args.community_size)}"] if args.community_size else []
    return [f"dataset.num_nodes={nodes}", *GAT_GRAPH, *size]


def _communities(args: argparse.Namespace) -> str:
    return (f"one community per {args.community_size} nodes" if args.community_size
            else "the dataset's communities")


def part_a(args: argparse.Namespace) -> None:
    graph = [*_graph(args.nodes, args), f"train.epochs={args.epochs}"]
    rows = []
    for engine in args.engines:
        base = None
        for chunks in (1, args.chunks):
            label = f"{engine} k={chunks}"
            halo = args.halo if chunks > 1 else "exact"  # exact with one chunk: the full graph
            row = case([*graph, *GAT, *METIS_ALL, f"microbatch.halo={halo}", f"engine={engine}",
                        f"chunks={chunks}"], {}, args.safety_gb,
                       args.timeout)
            log_case(label, row)
            row = {"case": label, "engine": engine, "chunks": chunks, **row}
            if chunks == 1:
                base = row
            ok = base and base.get("peak_mb") and row.get("peak_mb") and row["status"] == "completed"
            for key in ("peak", "train"):
                row[f"{key}_ratio"] = (row[f"{key}_mb"] / base[f"{key}_mb"]
                                       if ok and row.get(f"{key}_mb") and base.get(f"{key}_mb") else None)
            # Above the interpreter's own resident memory (Python + torch + PyG).
            row["ratio_above_base"] = ((row["peak_mb"] - row["base_mb"]) / (base["peak_mb"] - base["base_mb"])
                                       if ok else None)
            rows.append(row)
    show(f"a. peak RSS, chunks={args.chunks} vs 1: 2-layer GAT, {args.nodes} nodes, avg degree 10, 128 "
          f"features, {_communities(args)}, targets=all, {args.halo}, METIS, {args.epochs} epoch(s) "
          "(MiB; ratio = / k=1 of the engine)",
          rows, ["case", "status", "peak_mb", "peak_ratio", "ratio_above_base", "setup_mb", "train_mb",
                 "train_ratio", "held_mb", "base_mb", "inflation", "replication", "epoch_s", "total_s",
                 "error"], OUT / f"memory_a{args.tag}.csv")


def _fits(nodes: int, chunks: int, args: argparse.Namespace, rows: list[dict[str, Any]]) -> bool:
    mode = [*FULL, "engine=single"] if chunks == 1 else [*METIS_ALL, f"microbatch.halo={args.halo}",
                                                         f"engine={args.engine}", f"chunks={chunks}"]
    row = case([*_graph(nodes, args), *GAT, *mode, f"train.epochs={args.epochs}"],
               {"train.memory_limit_gb": args.cap_gb}, args.cap_gb, args.timeout)
    label = "full batch" if chunks == 1 else f"{args.engine} k={chunks}"
    log_case(f"{label} n={nodes}", row)
    rows.append({"mode": label, "nodes": nodes, **row})
    return row["status"] == "completed"


def _largest(chunks: int, args: argparse.Namespace, rows: list[dict[str, Any]],
             start: int) -> tuple[int, int | None]:
    """Doubling search from ``start`` nodes, then one bisection step: (largest fit, smallest failure)."""
    nodes, fit, fail = start, None, None
    while nodes <= args.max_nodes:
        if _fits(nodes, chunks, args, rows):
            fit, nodes = nodes, nodes * 2
        else:
            fail = nodes
            break
    if fit is None:
        raise SystemExit(f"chunks={chunks}: even {start} nodes do not fit under "
                         f"{args.cap_gb} GiB; lower --start-nodes")
    if fail is not None and args.bisect:
        middle = (fit + fail) // 2
        if _fits(middle, chunks, args, rows):
            fit = middle
        else:
            fail = middle
    return fit, fail


def part_b(args: argparse.Namespace) -> None:
    rows: list[dict[str, Any]] = []
    full, full_fail = _largest(1, args, rows, args.start_nodes)
    # Micro-batches fit at least what full batch fits: start the doubling there.
    micro, micro_fail = _largest(args.chunks, args, rows, full)
    show(f"b. doubling search under train.memory_limit_gb={args.cap_gb} (RLIMIT_AS): 2-layer GAT, avg "
          f"degree 10, 128 features, {_communities(args)}, targets=all, {args.halo} halos, "
          f"{args.epochs} epoch(s)", rows,
          ["mode", "nodes", "status", "peak_mb", "setup_mb", "train_mb", "held_mb", "edges", "inflation",
           "epoch_s", "total_s", "error"], OUT / f"memory_b{args.tag}.csv")
    summary = [{"mode": "full batch", "largest_nodes": full, "first_failure": full_fail},
               {"mode": f"{args.engine} k={args.chunks}", "largest_nodes": micro, "first_failure": micro_fail,
                "x_full_batch": micro / full}]
    show("b. largest graph that trains under the cap (first_failure: the smallest size that did not; "
          "None = --max-nodes reached)", summary,
          ["mode", "largest_nodes", "first_failure", "x_full_batch"], OUT / f"memory_b_summary{args.tag}.csv")


def part_c(args: argparse.Namespace) -> None:
    graph = [f"dataset.num_nodes={args.c_nodes}", f"dataset.avg_degree={args.c_degree}",
             "dataset.num_features=128", f"train.epochs={args.epochs}", "model=gcn", "engine=single", *FULL]
    rows = []
    for hidden in args.c_hidden:
        base = None
        for framework, aggregation in (("pyg", "messages"), ("pyg", "sparse"), ("dgl", "messages"),
                                       ("dgl", "sparse")):
            label = f"{framework} {aggregation} hidden={hidden}"
            row = case([*graph, f"framework={framework}", f"model.hidden={hidden}"],
                       {"model.aggregation": aggregation}, args.safety_gb, args.timeout)
            log_case(label, row)
            row = {"case": label, "framework": framework, "aggregation": aggregation, "hidden": hidden, **row}
            base = base or row
            ok = row["status"] == "completed" and base["status"] == "completed"
            row["peak_ratio"] = row["peak_mb"] / base["peak_mb"] if ok else None
            row["train_ratio"] = row["train_mb"] / base["train_mb"] if ok else None
            row["train_above_held"] = row["train_mb"] - row["held_mb"] if ok else None
            rows.append(row)
    show(f"c. GCN full batch, {args.c_nodes} nodes, avg degree {args.c_degree}, 128 features, "
          f"{args.epochs} epoch(s): aggregation messages vs sparse (MiB; ratios = / pyg messages of the "
          "same hidden size; train_above_held = training peak above what is resident when it starts)",
          rows, ["case", "status", "peak_mb", "peak_ratio", "train_mb", "train_ratio", "train_above_held",
                 "held_mb", "base_mb", "edges", "epoch_s", "total_s", "error"],
          OUT / f"memory_c{args.tag}.csv")


def part_d(args: argparse.Namespace) -> None:
    graph = [f"dataset.num_nodes={args.d_nodes}", "dataset.avg_degree=10",
             f"dataset.num_features={args.d_features}", f"train.epochs={args.d_epochs}"]
    modes = [("full batch", [*FULL, "engine=single"])] + [
        (f"{engine} k={args.chunks}", [*METIS_ALL, "microbatch.halo=exact", f"engine={engine}",
                                       f"chunks={args.chunks}"]) for engine in args.engines]
    rows = []
    for label, mode in modes:
        for precision in PRECISIONS:
            row = case([*graph, *GAT, *mode, f"train.precision={precision}"], {}, args.safety_gb,
                       args.timeout)
            log_case(f"{label} {precision}", row)
            rows.append({"mode": label, "precision": precision, **row})
    about = (f"2-layer GAT, {args.d_nodes} nodes, avg degree 10, {args.d_features} features, targets=all, "
             f"exact halos, METIS, {args.d_epochs} epochs")
    show(f"d. train.precision fp32 vs bf16: {about} (MiB; epoch_s = median after a warm-up epoch)", rows,
          ["mode", "precision", "status", "peak_mb", "setup_mb", "train_mb", "held_mb", "feature_mb",
           "base_mb", "epoch_s", "total_s", "error"], OUT / f"memory_d{args.tag}.csv")
    ratios = side_by_side(rows, "precision", "fp32", "bf16",
                          ("peak_mb", "train_mb", "held_mb", "feature_mb", "epoch_s"))
    show("d. bf16 / fp32 side by side (ratios < 1: bf16 needs less)", ratios,
          ["mode", "fp32_peak_mb", "bf16_peak_mb", "peak_ratio", "fp32_train_mb", "bf16_train_mb",
           "train_ratio", "held_ratio", "feature_ratio", "fp32_epoch_s", "bf16_epoch_s", "epoch_ratio"],
          OUT / f"memory_d_ratios{args.tag}.csv")


def part_e(args: argparse.Namespace) -> None:
    graph = [f"dataset.num_nodes={args.e_nodes}", "dataset.avg_degree=10",
             f"dataset.num_features={args.e_features}", f"train.epochs={args.e_epochs}"]
    micro = ["microbatch.partition=metis", "microbatch.targets=all", "microbatch.halo=exact",
             f"chunks={args.chunks}"]
    modes = [("full batch", [*FULL, "engine=single"])] + [
        (f"{engine} k={args.chunks} {first}",
         [*micro, f"engine={engine}", f"microbatch.first_transform={first}"])
        for engine in args.engines for first in ("per_micro_batch", "once_per_step")]
    rows = []
    for label, mode in modes:
        for features in ("memory", "disk"):
            row = case([*graph, *GAT, *mode, f"data.features={features}"], {}, args.safety_gb, args.timeout)
            log_case(f"{label} {features}", row)
            rows.append({"mode": label, "features": features, **row})
    about = (f"2-layer GAT, {args.e_nodes} nodes, avg degree 10, {args.e_features} features, targets=all, "
             f"{args.e_epochs} epochs")
    show(f"e. data.features memory vs disk: {about} (MiB; epoch_s = median after a warm-up epoch, the "
          "feature file in the page cache; step_read = bytes and read calls of a training step)", rows,
          ["mode", "features", "status", "epoch_s", "peak_mb", "setup_mb", "train_mb", "held_mb",
           "step_read_mb", "step_read_calls", "load_s", "order_s", "build_s", "total_s", "error"],
          OUT / f"memory_e{args.tag}.csv")
    ratios = side_by_side(rows, "features", "memory", "disk", ("epoch_s", "peak_mb", "train_mb"),
                          copied=("step_read_mb", "step_read_calls"))
    show("e. disk / memory side by side", ratios,
          ["mode", "memory_epoch_s", "disk_epoch_s", "epoch_ratio", "memory_peak_mb", "disk_peak_mb",
           "peak_ratio", "train_ratio", "step_read_mb", "step_read_calls"],
          OUT / f"memory_e_ratios{args.tag}.csv")


def part_f(args: argparse.Namespace) -> None:
    modes = {"full batch, memory": ("full_memory", [*FULL, "engine=single", "data.features=memory"])}
    for targets in args.f_targets:
        modes[f"single k={args.chunks} exact, disk, targets={targets}"] = (f"k{args.chunks}_disk_{targets}", [
            "microbatch.partition=metis", f"microbatch.targets={targets}", "microbatch.halo=exact",
            "microbatch.first_transform=per_micro_batch", "engine=single", f"chunks={args.chunks}",
            "data.features=disk"])
    records = OUT / f"memory_f{args.tag}_records"
    rows: list[dict[str, Any]] = []
    summary = []
    for label, (slug, mode) in modes.items():
        nodes, fit, fail = args.start_nodes, None, None
        while nodes <= args.f_max_nodes:
            with tempfile.TemporaryDirectory(prefix="pipegnn-features-") as cache:
                graph = [f"dataset.num_nodes={nodes}", f"dataset.avg_degree={args.f_degree}",
                         f"dataset.num_features={args.f_features}", f"train.epochs={args.epochs}",
                         f"cache_root={cache}"]
                row = case([*graph, *GAT, *mode], {"train.memory_limit_gb": args.cap_gb}, args.cap_gb,
                           args.timeout, record=records / f"{slug}_n{nodes}.json")
            feature_gib = nodes * args.f_features * 4 / 2 ** 30
            log_case(f"{label} n={nodes} ({feature_gib:.2f} GiB of float32 features)", row)
            rows.append({"mode": label, "nodes": nodes, "feature_gib": feature_gib, **row})
            if row["status"] != "completed":
                fail = nodes
                break
            fit, nodes = nodes, nodes * 2
        summary.append({"mode": label, "largest_nodes": fit, "first_failure": fail,
                        "largest_feature_gib": fit * args.f_features * 4 / 2 ** 30 if fit else None,
                        "epoch_s": next((r["epoch_s"] for r in rows
                                         if r["mode"] == label and r["nodes"] == fit), None)})
    about = (f"2-layer GAT, avg degree {args.f_degree}, {args.f_features} features, {args.epochs} epoch(s), "
             f"under train.memory_limit_gb={args.cap_gb} (RLIMIT_AS)")
    show(f"f. doubling search, features in memory vs on disk: {about}", rows,
          ["mode", "nodes", "feature_gib", "status", "peak_mb", "setup_mb", "train_mb", "epoch_s",
           "step_read_mb", "load_s", "order_s", "build_s", "inflation", "total_s", "error"],
          OUT / f"memory_f{args.tag}.csv")
    show(f"f. largest graph that trains under {args.cap_gb} GiB (first_failure: the smallest size that did "
          f"not; None = --f-max-nodes reached)", summary,
          ["mode", "largest_nodes", "largest_feature_gib", "first_failure", "epoch_s"],
          OUT / f"memory_f_summary{args.tag}.csv")
    figure = OUT / f"memory_f{args.tag}.png"
    plot_f(rows, args.cap_gb, args.f_features, about, figure)
    print(f"-> {figure.relative_to(ROOT)}; records: {records.relative_to(ROOT)}/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["a", "b", "c", "d", "e", "f", "all"], default="all")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per case (1-3)")
    parser.add_argument("--safety-gb", type=float, default=7.0,
                        help="train.memory_limit_gb of every case without its own cap (GiB)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per case")
    parser.add_argument("--nodes", type=int, default=300_000, help="part a: graph size")
    parser.add_argument("--chunks", type=int, default=None, help="micro-batches (a, d, e, f: 16, b: 32)")
    parser.add_argument("--engines", nargs="+", default=["single", "gpipe"], help="parts a, d: engines")
    parser.add_argument("--engine", default="single", help="part b: engine of the micro-batched runs")
    parser.add_argument("--halo", default="exact", choices=["exact", "historical"],
                        help="parts a, b: halo mode of the micro-batched runs")
    parser.add_argument("--cap-gb", type=float, default=3.0, help="part b: train.memory_limit_gb (GiB)")
    parser.add_argument("--start-nodes", type=int, default=25_000, help="part b: first size")
    parser.add_argument("--max-nodes", type=int, default=3_200_000, help="part b: stop doubling here")
    parser.add_argument("--community-size", type=int, default=None,
                        help="parts a, b: nodes per community (default: the dataset's 30 communities)")
    parser.add_argument("--no-bisect", dest="bisect", action="store_false", help="part b: doubling only")
    parser.add_argument("--c-nodes", type=int, default=20_000, help="part c: graph size")
    parser.add_argument("--c-degree", type=float, default=200.0, help="part c: average degree")
    parser.add_argument("--c-hidden", type=int, nargs="+", default=[16, 64], help="part c: GCN hidden")
    parser.add_argument("--d-nodes", type=int, default=100_000, help="part d: graph size")
    parser.add_argument("--d-features", type=int, default=512, help="part d: feature width")
    parser.add_argument("--d-epochs", type=int, default=3, help="part d: epochs per case (>= 2 for a "
                        "median epoch time after the warm-up epoch)")
    parser.add_argument("--e-nodes", type=int, default=200_000, help="part e: graph size")
    parser.add_argument("--e-features", type=int, default=256, help="part e: feature width")
    parser.add_argument("--e-epochs", type=int, default=4, help="part e: epochs per case")
    parser.add_argument("--f-features", type=int, default=1024, help="part f: feature width")
    parser.add_argument("--f-degree", type=float, default=4.5, help="part f: average degree")
    parser.add_argument("--f-max-nodes", type=int, default=1_600_000, help="part f: stop doubling here")
    parser.add_argument("--f-targets", nargs="+", choices=["train", "all"], default=["train"],
                        help="part f: microbatch.targets of the micro-batched runs on disk (targets=all "
                        "computes every node's 2-hop halo each step)")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every case, e.g. "
                        "dataset.num_communities=150 dataset.homophily=0.95 framework=dgl")
    parser.add_argument("--tag", default="", help="suffix of the CSV names (memory_<part><tag>.csv)")
    args = parser.parse_args(argv)
    EXTRA.extend(args.overrides)
    if args.overrides:
        print(f"extra overrides for every case: {' '.join(args.overrides)}")
    parts = ["a", "b", "c", "d", "e", "f"] if args.part == "all" else [args.part]
    for part in parts:
        part_args = argparse.Namespace(**vars(args))
        part_args.chunks = args.chunks or {"a": 16, "b": 32, "d": 16, "e": 16, "f": 16}.get(part)
        {"a": part_a, "b": part_b, "c": part_c, "d": part_d, "e": part_e, "f": part_f}[part](part_args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
