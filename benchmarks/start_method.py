"""How long a 2-stage ``pipelining`` run takes to start its workers, by ``engine.start_method``: the
forkserver as on this machine (no CUDA device: it preloads the trainer, PyG included), the forkserver as
on a machine with a CUDA device (``forkserver (CUDA)``: it imports only torch, never CUDA or PyG, and
each worker imports the trainer after the fork; pretended here by giving the launcher that preload), and
fresh interpreters (``spawn``). Start-up is the launch time less the workers' own run time
(``timing.launch_s - timing.workers_total_s``: process start, imports, the process group, the exit)
plus ``timing.forkserver_ready_s`` (the server's start, before the run's clock), for the first job of a
process (which also starts the forkserver) and the second (which reuses it, as a sweep's later jobs do);
each method in fresh processes, ``--repeats`` times, on the tiny test graph.

    OMP_NUM_THREADS=1 python benchmarks/start_method.py | tee results/benchmarks/start_method.txt
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from pipegnn import run
from pipegnn.config.schema import compose_config
from pipegnn.training.processes import spawn

METHODS = ("forkserver", "forkserver (CUDA)", "spawn")

TINY = ["dataset.num_nodes=400", "dataset.num_features=16", "dataset.num_communities=6",
        "dataset.train_per_class=10", "dataset.num_val=40", "dataset.num_test=60"]


def _start_ups(method: str) -> list[float]:
    """Start-up seconds of the first and the second run of this process."""
    if method == "forkserver (CUDA)":  # benchmark-only: the preload a machine with CUDA devices gets
        spawn.forkserver_preload = lambda target_module: list(spawn.FORKSERVER_PRELOAD)
    out = []
    for _ in range(2):
        start = method.split()[0]
        overrides = [*TINY, "engine=pipelining", "train.epochs=1", f"engine.start_method={start}"]
        record = run(compose_config(overrides))
        if record["status"] != "completed":
            raise SystemExit(f"{method}: {record['error']}")
        timing = record["timing"]
        out.append(timing["launch_s"] - timing["workers_total_s"] + timing.get("forkserver_ready_s", 0.0))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(" ".join(f"{s:.3f}" for s in _start_ups(args.child)))
        return 0
    times: dict[str, list[list[float]]] = {method: [] for method in METHODS}
    for _ in range(args.repeats):  # alternated, each in a fresh process
        for method in times:
            done = subprocess.run([sys.executable, __file__, "--child", method], capture_output=True,
                                  text=True, check=True)
            times[method].append([float(s) for s in done.stdout.split()[-2:]])
    print(f"start-up of a 2-stage pipelining run, seconds ({args.repeats} processes per method; "
          "median, range)")
    print(f"{'start_method':18s} {'first job':>22s} {'later job':>22s}")
    for method, runs in times.items():
        cells = []
        for i in range(2):
            values = [r[i] for r in runs]
            cells.append(f"{statistics.median(values):6.2f} ({min(values):.2f}-{max(values):.2f})")
        print(f"{method:18s} {cells[0]:>22s} {cells[1]:>22s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
