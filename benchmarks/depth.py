"""Where do pipelines pay off? The depth map: deep GNNs, pipelines against what a user runs instead.

For every graph, model (GCNII, residual GCN, residual GAT), depth and width (``--hidden``), in one run
and side by side:

- what a user with the pipeline's cores runs instead, one process with as many threads as the pipeline
  has in all (``--threads``, 2 x ``--stage-threads``): full batch, and the single engine on the same
  micro-batches;
- the same with the pipeline's per-process budget (``--stage-threads``, 1: "same micro-batches" speedup);
- ``engine=pipelining`` with 2 processes x ``--stage-threads`` threads (``engine.threads``), GPipe and
  1F1B schedules, ``balance=auto``;

each for exact (up to ``--exact-max-layers``) and historical halos at every k (``microbatch.targets=all``,
METIS), and for each ``model.aggregation`` of ``--aggregations`` (PyG's messages, or a torch CSR
sparse-dense matmul: which is faster, and which scales better with threads, differs). Per case: median
epoch time (after the first; with ``--repeats``, the median over runs of it and their spread),
training time to 98% of the run's best validation accuracy, peak memory per process, work inflation
(rows computed / full graph's), measured bubble and imbalance. The summary gives, per depth, the best
pipeline, the best single-process run on the same cores (up to ``--threads`` threads), and their ratio
(its ``_x1`` columns: against the runs with the pipeline's threads per process). Every case sets its
threads with ``engine.threads``. Time only on a quiet machine: two timings at once on these cores
distort both. On a machine with more cores, ``--stage-threads 4`` sets 2 x 4 threads against one
process with 8.

    OMP_NUM_THREADS=1 python benchmarks/depth.py --datasets synthetic --depths 8 16 --chunks 8 \\
        --csv results/benchmarks/depth_synthetic.csv
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pipegnn import run  # noqa: E402
from pipegnn.config.schema import compose_config  # noqa: E402

#: model name in the table: overrides.
MODELS = {"gcn2": ["model=gcn2"], "residual_gcn": ["model=gcn", "model.residual=true"],
          "residual_gat": ["model=gat", "model.residual=true"]}
#: attention heads of a model whose layer width is heads x hidden (``--hidden`` is the width)
HEADS = {"residual_gat": 8}
PIPELINES = {
    "pipelining gpipe": ["engine=pipelining", "engine.schedule=gpipe", "engine.balance=auto"],
    "pipelining 1f1b": ["engine=pipelining", "engine.schedule=1f1b", "engine.balance=auto"],
}


def _case(args: argparse.Namespace, overrides: list[str], threads: int, **labels: object) -> dict:
    cfg = compose_config([f"train.epochs={args.epochs}", "microbatch.targets=all", *overrides,
                          f"engine.threads={threads}", *args.overrides])
    record = run(cfg)
    row = {**labels, "threads": threads, "status": record["status"]}
    if record["status"] != "completed":
        print(f"{labels}: {record['status']}: {record['error']}", file=sys.stderr, flush=True)
        return row
    memory, p = record["memory"], record["pipeline"]
    rss = memory.get("peak_rss_bytes_per_rank") or [memory["peak_rss_bytes"]]
    row.update(epoch_s=record["timing"]["epoch_time_median_s"],
               tta_s=record["final"]["time_to_accuracy"]["train_s"],
               best_val=record["final"]["best_val_acc"],
               inflation=record["microbatch"].get("inflation"),
               peak_mb_per_process=" ".join(f"{r / 2**20:.0f}" for r in rss),
               bubble=p.get("bubble"), imbalance=p.get("imbalance"),
               balance=",".join(map(str, p.get("balance", []))))
    print(f"{labels} x{threads}: {row['epoch_s']:.3f} s", file=sys.stderr, flush=True)
    return row


#: what identifies a case across repeats
CASE_KEYS = ["dataset", "model", "layers", "hidden", "aggregation", "case", "halo", "k", "threads"]
#: per case, the median over repeats of these
MEDIANS = ["epoch_s", "tta_s", "best_val", "bubble", "imbalance"]


def measure(args: argparse.Namespace) -> pd.DataFrame:
    """Every case ``args.repeats`` times, the whole map once per repeat (so that a drift of the
    machine's speed touches every case alike), combined by :func:`combine`."""
    return combine(pd.DataFrame([row for _ in range(args.repeats) for row in _measure_once(args)]))


def combine(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per case: the median over its completed runs of :data:`MEDIANS`, the rest from its
    first run, with ``runs`` (completed) and ``epoch_s_spread`` ((max - min) / median epoch); a case
    none of whose runs completed keeps its first run's row."""
    rows = []
    for _, group in runs.groupby(CASE_KEYS, sort=False, dropna=False):
        done = group[group.status == "completed"]
        row = (done if len(done) else group).iloc[0].to_dict()
        if len(done):
            row.update({m: done[m].median() for m in MEDIANS if m in done})
            row["epoch_s_spread"] = (done.epoch_s.max() - done.epoch_s.min()) / done.epoch_s.median()
        row["runs"] = len(done)
        rows.append(row)
    return pd.DataFrame(rows)


def _measure_once(args: argparse.Namespace) -> list[dict]:
    return [_case(args, overrides, threads, **labels) for overrides, threads, labels in plan(args)]


def plan(args: argparse.Namespace) -> list[tuple[list[str], int, dict]]:
    """The map's cases in run order: (config overrides, threads, table labels)."""
    cases, budgets = [], sorted({args.stage_threads, cores(args)})
    for dataset in args.datasets:
        for model in args.models:
            for depth, hidden, aggregation in itertools.product(args.depths, args.hidden, args.aggregations):
                base = [f"dataset={dataset}", *MODELS[model], f"model.layers={depth}",
                        f"model.hidden={hidden // HEADS.get(model, 1)}", f"model.aggregation={aggregation}"]
                where = dict(dataset=dataset, model=model, layers=depth, hidden=hidden,
                             aggregation=aggregation)
                for threads in budgets:
                    cases.append(([*base, "engine=single", "chunks=1", "microbatch.halo=none"], threads,
                                  dict(**where, case=f"full batch x{threads}", halo="full", k=1)))
                halos = [h for h in args.halos if h != "exact" or depth <= args.exact_max_layers]
                for k in args.chunks:
                    for halo in halos:
                        mb = [*base, f"chunks={k}", f"microbatch.halo={halo}"]
                        if halo == "historical":
                            mb.append(f"microbatch.halo_dropout={args.halo_dropout}")
                        for threads in budgets:  # the pipeline's budget per process, and the cores'
                            cases.append(([*mb, "engine=single"], threads,
                                          dict(**where, case=f"single x{threads}", halo=halo, k=k)))
                        for name, overrides in PIPELINES.items():
                            cases.append(([*mb, *overrides], args.stage_threads,
                                          dict(**where, case=name, halo=halo, k=k)))
    return cases


def cores(args: argparse.Namespace) -> int:
    """Threads of the single-process baselines: ``--threads``, else the pipeline's (2 x stage threads)."""
    return args.threads or 2 * args.stage_threads


def summarise(table: pd.DataFrame, threads: int, stage_threads: int = 1) -> pd.DataFrame:
    """Per graph, model and depth: the fastest pipeline, the fastest single-process run on the same
    cores (full batch or micro-batched, with ``threads`` threads or fewer: where more threads slow a run
    down, a user runs fewer) and their ratio; and the pipeline's speedup over the single engine with
    the pipeline's threads per process (``stage_threads``) on the same micro-batches (same k and halo);
    and that single engine's historical epoch over full batch's with as many threads, beside its work
    inflation (at the best pipeline's k; the goal: not above it). With several aggregations, the best of
    each side over all of them; the same-micro-batch and historical figures in the best pipeline's."""
    done = table[table.status == "completed"]
    done = done.assign(**{k: v for k, v in (("aggregation", "messages"), ("hidden", 64)) if k not in done})
    rows = []
    for (dataset, model, layers, hidden), group in done.groupby(["dataset", "model", "layers", "hidden"]):
        pipes = group[group.case.str.startswith("pipelining")]
        alone = group[group.threads <= threads]
        alone = alone[~alone.case.str.startswith("pipelining")]
        if pipes.empty or alone.empty:
            continue
        best_pipe, best_alone = pipes.loc[pipes.epoch_s.idxmin()], alone.loc[alone.epoch_s.idxmin()]
        group = group[group.aggregation == best_pipe.aggregation]
        single = group[group.case == f"single x{stage_threads}"]
        full = group[group.case == f"full batch x{stage_threads}"]
        same = single[(single.k == best_pipe.k) & (single.halo == best_pipe.halo)]
        hist = single[(single.k == best_pipe.k) & (single.halo == "historical")]
        full_s = full.epoch_s.iloc[0] if len(full) else None
        vs_same = (same.epoch_s.iloc[0] / best_pipe.epoch_s) if len(same) else None
        historical_over_full = hist.epoch_s.iloc[0] / full_s if len(hist) and full_s else None
        rows.append({"dataset": dataset, "model": model, "layers": layers, "hidden": hidden,
                     "stage_threads": stage_threads,
                     "best_pipeline": f"{best_pipe.case} {best_pipe.halo} k={best_pipe.k}",
                     "pipeline_s": best_pipe.epoch_s,
                     "best_alone": f"{best_alone.case} {best_alone.halo} k={best_alone.k}",
                     "alone_s": best_alone.epoch_s, "pipeline_aggregation": best_pipe.aggregation,
                     "alone_aggregation": best_alone.aggregation,
                     "speedup": best_alone.epoch_s / best_pipe.epoch_s,
                     "vs_single_x1_same_mb": vs_same,
                     "pipeline_inflation": best_pipe.inflation, "pipeline_bubble": best_pipe.bubble,
                     "historical_over_full_x1": historical_over_full,
                     "historical_inflation": hist.inflation.iloc[0] if len(hist) else None})
    return pd.DataFrame(rows)


def figure(summary: pd.DataFrame, path: Path, threads: int, stage_threads: int = 1) -> None:
    """The best pipeline's speedup against depth, one line per graph, model and width; against width
    (one line per graph, model and depth) when the map has one depth and several widths."""
    by_width = summary.layers.nunique() == 1 < summary.hidden.nunique()
    x, line = ("hidden", "layers") if by_width else ("layers", "hidden")
    fig, ax = plt.subplots(figsize=(6, 4))
    for (dataset, model, fixed), group in summary.groupby(["dataset", "model", line]):
        suffix = f", {line} {fixed}" if summary[line].nunique() > 1 or x == "hidden" else ""
        ax.plot(group[x], group.speedup, marker="o", label=f"{model}, {dataset}{suffix}")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(x)
    ax.set_ylabel(f"best pipeline (2 x {_threads(stage_threads)}) / best\n"
                  f"single process (<= {threads} threads), speedup")
    ax.set_title("Where pipelines pay off on this machine")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n > 1 else ''}"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["synthetic", "cora"])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--chunks", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--halos", nargs="+", default=["exact", "historical"])
    parser.add_argument("--aggregations", nargs="+", default=["messages"], choices=["messages", "sparse"],
                        help="model.aggregation of every case (several: each case once per aggregation, the "
                        "summary's best over all of them)")
    parser.add_argument("--exact-max-layers", type=int, default=4,
                        help="exact halos only up to this depth: deeper, each micro-batch's halo is nearly "
                        "the whole graph (work inflation 6.0 at 8 layers, 7.0 at 16, k=8: "
                        "results/benchmarks/depth_synthetic.txt) and one case takes minutes")
    parser.add_argument("--halo-dropout", default="read", choices=["read", "node"],
                        help="microbatch.halo_dropout of the historical cases")
    parser.add_argument("--hidden", type=int, nargs="+", default=[64],
                        help="layer widths (several: the map once per width, the summary per width)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1, help="runs of every case (the map once per "
                        "repeat); the tables give the median epoch and the spread")
    parser.add_argument("--stage-threads", type=int, default=1, help="threads of each pipeline process "
                        "(engine.threads); the per-process baselines run with as many")
    parser.add_argument("--threads", type=int, help="threads of the single-process baselines (default: the "
                        "pipeline's, 2 x --stage-threads)")
    parser.add_argument("--csv", type=Path, help="write the cases here, the summary beside it (_summary) "
                        "and the figure (.png)")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every case")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    table = measure(args)
    summary = summarise(table, cores(args), args.stage_threads)
    print(f"\ncases ({args.epochs} epochs, median epoch after the first; tta: training seconds to 98% of the "
          "run's best validation accuracy)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"\nbest pipeline (2 processes x {_threads(args.stage_threads)}) against the best single process "
          f"with up to {cores(args)} threads")
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
        summary.to_csv(args.csv.with_name(f"{args.csv.stem}_summary.csv"), index=False)
        if not summary.empty:
            figure(summary, args.csv.with_suffix(".png"), cores(args), args.stage_threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
