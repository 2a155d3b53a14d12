"""Does ``torch.compile`` pay for a micro-batched step? The single engine's training step on Cora (GAT 2
layers, exact halos, METIS, ``targets=all``) eager, then with every unit's ``compute`` compiled
(inductor, static shapes), side by side in one run: the eager step, the first compiled step (the
compiling) and the compiled step, medians over ``--steps`` steps after warm-ups.

A unit computes a different micro-batch, of other sizes, each call, so dynamo guards on the sizes and
recompiles a unit per micro-batch up to its ``recompile_limit`` (8 by default), then runs the rest
eagerly: what this measures is whether that leaves anything to gain.

    OMP_NUM_THREADS=1 python benchmarks/compile_step.py | tee results/benchmarks/compile_step.txt
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from pipegnn import build, compose_config


def median_step(step, steps: int) -> float:
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    trainee = build(compose_config(["dataset=cora", "model=gat", "model.dropout=0", f"chunks={args.chunks}",
                                    "microbatch.targets=all", "microbatch.partition=metis", "engine=single",
                                    "engine.timeline=false", "engine.trace_epoch=null"]))
    engine, ids = trainee.engine, trainee.training.ids
    labels, labelled = trainee.train_labels()

    def step() -> float:
        return engine.train_step(ids, labels, labelled)

    for _ in range(2):
        step()
    eager = median_step(step, args.steps)
    for unit in engine.model:
        unit.compute = torch.compile(unit.compute, dynamic=False)
    start = time.perf_counter()
    step()
    compiling = time.perf_counter() - start
    step()  # a micro-batch past the recompile limit runs eagerly from here on
    compiled = median_step(step, args.steps)
    print(f"GAT 2 layers, Cora, exact k={args.chunks}, single engine, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s)")
    print(f"eager step {eager:.4f} s; first compiled step (compiling) {compiling:.1f} s; compiled step "
          f"{compiled:.4f} s ({compiled / eager:.2f}x eager)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
