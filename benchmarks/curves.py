"""Learning-curve stability and accuracy of the synthetic graph's old and new defaults, side by side.

For GAT and GCN, every case runs with train.seed 0..N-1 (the graph, dataset.seed, stays the same) through
``pipegnn.run``; the table shows, per case, the standard deviation of the validation accuracy over the
last 50 epochs (points: mean over seeds, and the largest), the final test accuracy and the test accuracy
at the best validation epoch (mean +- sample std over seeds), and the best epoch. Full batch runs for
the old defaults (passed as overrides, ``OLD``) and the new ones (conf/dataset/synthetic.yaml); then
GPipe k=8 with exact halos (METIS) against naive contiguous chunks (halo none, sequential: the poster's
setting) on the new defaults, with ``--chunk-seeds`` seeds.

    python benchmarks/curves.py --csv results/benchmarks/curves_synthetic.csv
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd

from pipegnn import run
from pipegnn.config.schema import compose_config

#: The defaults before the change, as overrides: the generator's (50-word documents at signal 0.07) and,
#: for GAT, the GAT paper's PubMed settings it used on this graph (lr 0.01, weight decay 0.001, 8 output
#: heads; conf/dataset_model/synthetic_gat.yaml before).
OLD_GRAPH = ["dataset.signal=0.07", "dataset.words_per_node=50", "dataset.homophily=0.7"]
OLD = {"gat": [*OLD_GRAPH, "model.lr=0.01", "model.weight_decay=0.001", "model.out_heads=8"],
       "gcn": OLD_GRAPH}
FULL = ["engine=single", "chunks=1", "microbatch.halo=none"]
EXACT = ["engine=gpipe", "chunks=8", "microbatch.halo=exact", "microbatch.partition=metis"]
NAIVE = ["engine=gpipe", "chunks=8", "microbatch.halo=none", "microbatch.partition=sequential"]
#: (case, overrides, seeds option): full batch on both defaults, then k=8 exact vs naive.
CASES = [("old defaults, full batch", FULL, "seeds"),
         ("new defaults, full batch", FULL, "seeds"),
         ("new defaults, gpipe k=8 exact (metis)", EXACT, "chunk_seeds"),
         ("new defaults, gpipe k=8 naive (sequential)", NAIVE, "chunk_seeds")]
LAST = 50  # epochs at the end whose validation accuracy spread is measured


def one_run(overrides: list[str]) -> dict:
    record = run(compose_config(overrides))
    if record["status"] != "completed":
        raise RuntimeError(f"{' '.join(overrides)}: {record['status']}: {record.get('error')}")
    val = [e["val_acc"] for e in record["epochs"]]
    final = record["final"]
    return {"val_std_last": 100 * statistics.stdev(val[-LAST:]), "test_final": final["test_acc"],
            "test_at_best_val": final["test_acc_at_best_val"], "best_epoch": final["best_epoch"]}


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=5, help="train.seed 0..N-1, full batch cases")
    parser.add_argument("--chunk-seeds", type=int, default=3, help="train.seed 0..N-1, k=8 cases")
    parser.add_argument("--models", nargs="+", default=["gat", "gcn"], choices=sorted(OLD))
    parser.add_argument("--cases", nargs="+", type=int, choices=range(len(CASES)), default=range(len(CASES)),
                        help="run only these cases (0-based, in the order above)")
    parser.add_argument("--csv", type=Path, help="write the table as CSV (and the printed table as .txt)")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every case")
    args = parser.parse_args(argv)
    if args.epochs <= LAST:
        parser.error(f"--epochs must exceed {LAST}")
    rows = []
    for model in args.models:
        for case, overrides, seeds in (CASES[i] for i in args.cases):
            old = OLD[model] if case.startswith("old") else []
            runs = [one_run(["dataset=synthetic", f"model={model}", f"train.epochs={args.epochs}",
                             f"train.seed={seed}", *old, *overrides, *args.overrides])
                    for seed in range(getattr(args, seeds))]
            spread = [r["val_std_last"] for r in runs]
            final, best = ([r[key] for r in runs] for key in ("test_final", "test_at_best_val"))
            rows.append({"model": model, "case": case, "seeds": len(runs),
                         "val_std_last50_mean": statistics.mean(spread), "val_std_last50_max": max(spread),
                         "test_final_mean": mean_std(final)[0], "test_final_std": mean_std(final)[1],
                         "test_best_val_mean": mean_std(best)[0], "test_best_val_std": mean_std(best)[1],
                         "best_epoch_mean": statistics.mean(r["best_epoch"] for r in runs),
                         "test_best_val_per_seed": " ".join(f"{v:.3f}" for v in best),
                         "val_std_last50_per_seed": " ".join(f"{v:.2f}" for v in spread)})
            last = rows[-1]
            print(f"{model} {case}: {last['val_std_last50_per_seed']} / {last['test_best_val_per_seed']}",
                  file=sys.stderr, flush=True)
    text = render(pd.DataFrame(rows), args.epochs, args.models, args.overrides)
    print(text)
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(args.csv, index=False, float_format="%.4f")
        args.csv.with_suffix(".txt").write_text(text)
    return 0


def render(table: pd.DataFrame, epochs: int, models: list[str], overrides: list[str]) -> str:
    """The printed table of :func:`main`'s rows."""
    shown = pd.DataFrame({
        "model": table.model, "case": table.case, "seeds": table.seeds,
        f"val std last {LAST} (pts) mean/max": [f"{m:.2f} / {x:.2f}" for m, x in
                                                zip(table.val_std_last50_mean, table.val_std_last50_max)],
        "test final": [f"{100 * m:.1f} +- {100 * s:.1f}" for m, s in
                       zip(table.test_final_mean, table.test_final_std)],
        "test at best val": [f"{100 * m:.1f} +- {100 * s:.1f}" for m, s in
                             zip(table.test_best_val_mean, table.test_best_val_std)],
        "best epoch": [f"{v:.0f}" for v in table.best_epoch_mean]})
    extra = f" ({' '.join(overrides)})" if overrides else ""
    olds = "; ".join(f"{model}: {' '.join(OLD[model])}" for model in models)
    return (f"Learning curves on dataset=synthetic{extra}, {epochs} epochs; old defaults = "
            f"{olds}; accuracy in %, mean +- sample std over seeds\n"
            f"{shown.to_string(index=False)}\n")


if __name__ == "__main__":
    sys.exit(main())
