"""Accuracy of bf16 training (``train.precision=bf16``) next to fp32: Cora and CiteSeer, GAT and GCN.

Every dataset, model and precision trains full batch (``engine=single chunks=1 microbatch.halo=none``,
each model's own settings from ``conf/model/*.yaml``, ``--epochs`` 200) with seeds 0..``--seeds``-1 in
this process with ``pipegnn.run``; the measure is the test accuracy at the best validation epoch
(``record["final"]["test_acc_at_best_val"]``). The table puts each precision's mean ± std side by side
with the difference and whether ``|mean(bf16) - mean(fp32)| <= --tolerance`` (1 point) per dataset and
model; the exit code is 1 when any is not.

    python benchmarks/precision.py              # results/benchmarks/precision_accuracy.csv and .txt
    python benchmarks/precision.py --seeds 1 --epochs 3 --out /tmp/precision.csv   # a smoke run
    python benchmarks/precision.py framework=dgl --out results/benchmarks/precision_accuracy_dgl.csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from pipegnn import run
from pipegnn.config.schema import compose_config

OUT = Path(__file__).resolve().parents[1] / "results" / "benchmarks"
FULL = ["engine=single", "chunks=1", "microbatch.halo=none"]
PRECISIONS = ("fp32", "bf16")


def accuracy(dataset: str, model: str, precision: str, seed: int, epochs: int, overrides: list[str]) -> float:
    """Test accuracy at the best validation epoch of one full-batch run."""
    record = run(compose_config([f"dataset={dataset}", f"model={model}", f"train.epochs={epochs}",
                                 f"train.seed={seed}", f"train.precision={precision}", *FULL, *overrides]))
    if record["status"] != "completed":
        raise RuntimeError(f"{dataset} {model} {precision} seed {seed}: "
                           f"{record['status']}: {record['error']}")
    return record["final"]["test_acc_at_best_val"]


def compare(runs: pd.DataFrame, tolerance: float = 0.01) -> pd.DataFrame:
    """One row per dataset and model from per-run rows (``dataset``, ``model``, ``precision``, ``seed``,
    ``test_acc``): each precision's mean, sample std and seeds, ``diff`` = mean(bf16) - mean(fp32), and
    ``within`` = ``|diff| <= tolerance`` (accuracies as fractions: 0.01 is one point)."""
    rows = []
    for (dataset, model), group in runs.groupby(["dataset", "model"], sort=False):
        row = {"dataset": dataset, "model": model}
        for precision in PRECISIONS:
            acc = group.loc[group["precision"] == precision].sort_values("seed")["test_acc"]
            row.update({f"{precision}_mean": acc.mean(), f"{precision}_std": acc.std(),
                        f"{precision}_seeds": len(acc),
                        f"{precision}_per_seed": " ".join(f"{v:.3f}" for v in acc)})
        row["diff"] = row["bf16_mean"] - row["fp32_mean"]
        row["within"] = bool(abs(row["diff"]) <= tolerance)
        rows.append(row)
    return pd.DataFrame(rows)


def report(table: pd.DataFrame, tolerance: float, epochs: int, overrides: list[str]) -> str:
    """The printed table: mean ± std in points per precision, the difference and the verdict."""
    lines = [f"test accuracy at the best validation epoch, full batch, {epochs} epochs, mean ± std over "
             f"seeds (points){' [' + ' '.join(overrides) + ']' if overrides else ''}",
             f"{'dataset':<10} {'model':<6} {'fp32':>14} {'bf16':>14} {'bf16 - fp32':>12}  "
             f"|diff| <= {100 * tolerance:.1f}"]
    for r in table.to_dict("records"):
        cells = [f"{100 * r[f'{p}_mean']:6.2f} ± {100 * r[f'{p}_std']:5.2f}" for p in PRECISIONS]
        lines.append(f"{r['dataset']:<10} {r['model']:<6} {cells[0]:>14} {cells[1]:>14} "
                     f"{100 * r['diff']:+12.2f}  {'yes' if r['within'] else 'no'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 per dataset, model and precision")
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--datasets", nargs="+", default=["cora", "citeseer"])
    parser.add_argument("--models", nargs="+", default=["gat", "gcn"])
    parser.add_argument("--tolerance", type=float, default=0.01, help="largest |mean difference| (fraction)")
    parser.add_argument("--out", type=Path, default=OUT / "precision_accuracy.csv",
                        help="the table as CSV; the printed report goes beside it as .txt")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every run")
    args = parser.parse_args(argv)
    runs = []
    for dataset in args.datasets:
        for model in args.models:
            for precision in PRECISIONS:
                for seed in range(args.seeds):
                    acc = accuracy(dataset, model, precision, seed, args.epochs, args.overrides)
                    runs.append({"dataset": dataset, "model": model, "precision": precision, "seed": seed,
                                 "test_acc": acc})
                    print(f"{dataset} {model} {precision} seed {seed}: {100 * acc:.2f}", file=sys.stderr,
                          flush=True)
    table = compare(pd.DataFrame(runs), args.tolerance)
    text = report(table, args.tolerance, args.epochs, args.overrides)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    args.out.with_suffix(".txt").write_text(text + "\n")
    print(f"-> {args.out} and {args.out.with_suffix('.txt')}")
    return 0 if table["within"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
