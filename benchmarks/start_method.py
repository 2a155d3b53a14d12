"""How long a 2-stage ``pipelining`` run takes to start its workers, by ``engine.start_method``: the
forkserver (it imports torch once, never CUDA or PyG; each worker imports the trainer after the fork)
against fresh interpreters (``spawn``). Start-up is the launch time less the workers' own run time
(``timing.launch_s - timing.workers_total_s``: process start, imports, the process group, the exit),
for the first job of a process (which also starts the forkserver) and the second (which reuses it, as
a sweep's later jobs do); each method in fresh processes, ``--repeats`` times, on the tiny test graph.

    OMP_NUM_THREADS=1 python benchmarks/start_method.py | tee results/benchmarks/start_method.txt
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from pipegnn import run
from pipegnn.schema import compose_config

TINY = ["dataset.num_nodes=400", "dataset.num_features=16", "dataset.num_communities=6",
        "dataset.train_per_class=10", "dataset.num_val=40", "dataset.num_test=60"]


def _start_ups(method: str) -> list[float]:
    """Start-up seconds of the first and the second run of this process."""
    out = []
    for _ in range(2):
        overrides = [*TINY, "engine=pipelining", "train.epochs=1", f"engine.start_method={method}"]
        record = run(compose_config(overrides))
        if record["status"] != "completed":
            raise SystemExit(f"{method}: {record['error']}")
        out.append(record["timing"]["launch_s"] - record["timing"]["workers_total_s"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=["forkserver", "spawn"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(" ".join(f"{s:.3f}" for s in _start_ups(args.child)))
        return 0
    times: dict[str, list[list[float]]] = {"forkserver": [], "spawn": []}
    for _ in range(args.repeats):  # alternated, each in a fresh process
        for method in times:
            done = subprocess.run([sys.executable, __file__, "--child", method], capture_output=True, text=True,
                                  check=True)
            times[method].append([float(s) for s in done.stdout.split()[-2:]])
    print(f"start-up of a 2-stage pipelining run, seconds ({args.repeats} processes per method; median, range)")
    print(f"{'start_method':12s} {'first job':>22s} {'later job':>22s}")
    for method, runs in times.items():
        cells = []
        for i in range(2):
            values = [r[i] for r in runs]
            cells.append(f"{statistics.median(values):6.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"{method:12s} {cells[0]:>22s} {cells[1]:>22s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
