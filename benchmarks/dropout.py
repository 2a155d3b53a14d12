"""Why pipegnn draws its own dropout masks: torch's CPU dropout against pipegnn.dropout, side by side.

For the hidden rows of each graph (rows x width of a deep GCNII: the synthetic PubMed-shaped graph,
Cora, CiteSeer at their widths), in float32 and float64, one thread, median of ``--repeats`` calls:
a mask drawn with ``bernoulli_`` (how torch's dropout draws it) and with ``uniform_ < keep``
(:func:`pipegnn.dropout.fill_mask_`), and the whole dropout of the rows: ``F.dropout`` against
:func:`pipegnn.dropout.dropout`.

    OMP_NUM_THREADS=1 python benchmarks/dropout.py --csv results/benchmarks/dropout.csv
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
import torch.nn.functional as F

from pipegnn.dropout import dropout, fill_mask_

#: graph: (rows, width) of a deep GCNII's hidden layers
SHAPES = {"synthetic (PubMed-shaped), 64": (19717, 64), "Cora, 64": (2708, 64), "CiteSeer, 256": (3327, 256)}


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _row(graph: str, shape: tuple[int, int], dtype: torch.dtype, p: float, repeats: int) -> dict:
    """One graph's rows in one dtype: the median time of each mask and each dropout, and the speedups."""
    x, mask = torch.randn(shape, dtype=dtype), torch.empty(shape, dtype=dtype)
    keep = 1 - p
    row = {"rows x width": graph, "dtype": str(dtype).removeprefix("torch."),
           "bernoulli_ mask ms": _median_ms(lambda: mask.bernoulli_(keep).div_(keep), repeats),
           "uniform_ mask ms": _median_ms(lambda: fill_mask_(mask, p), repeats),
           "F.dropout ms": _median_ms(lambda: F.dropout(x, p, True), repeats),
           "pipegnn dropout ms": _median_ms(lambda: dropout(x, p, True), repeats)}
    row["mask speedup"] = row["bernoulli_ mask ms"] / row["uniform_ mask ms"]
    row["dropout speedup"] = row["F.dropout ms"] / row["pipegnn dropout ms"]
    return row


def measure(p: float, repeats: int) -> pd.DataFrame:
    rows = [_row(graph, shape, dtype, p, repeats)
            for graph, shape in SHAPES.items() for dtype in (torch.float32, torch.float64)]
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--p", type=float, default=0.6, help="dropout probability (GCNII's 0.6)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    table = measure(args.p, args.repeats)
    print(f"dropout p={args.p}, one thread, median of {args.repeats} calls, torch {torch.__version__}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
