"""Do the pipelines overlap? Epoch time of single vs gpipe vs pipelining, against the ideal.

For each k (micro-batches per step) the same exact METIS micro-batches run on the single engine
(the baseline), torchgpipe (2 CPU partitions) and torch.distributed.pipelining (2 processes, one thread
each) with the GPipe and 1F1B schedules and an even or a measured (``auto``) balance. Each row shows
the median epoch time, the speedup over the single engine at the same k, the ideal speedup computed from
the run's own measured stage busy times (``pipeline.ideal_speedup``), how close the measured step comes
to that ideal (``of_ideal`` = ideal makespan / measured makespan), and the measured bubble next to the
schedule's theoretical one. What recording the timeline costs is measured twice: two cases (k=8) run
``--overhead-repeats`` more times with and without it (``engine.timeline=false``), alternating (median
epoch time with / without - 1; runs vary by 10-20% here, so this bounds little), and within one process
the same single-engine and torchgpipe steps (k=8) run ``--overhead-steps`` times with the recording on
and off in turn (median step time with / without - 1: no run-to-run noise). Every case is a separate
``pipegnn.run`` in this process (pipelining's workers are processes of their own); records and traces go
to ``--out``.

    python benchmarks/pipeline.py --epochs 5 --csv results/benchmarks/pipeline_synthetic.csv \\
        --out results/reference/pipeline
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

import pandas as pd

from pipegnn import build, run
from pipegnn.config.schema import compose_config

CHUNKS = (1, 2, 4, 8, 16, 32)
#: name: (overrides, schedule or None); pipelining cases need k >= 2 for 1F1B.
ENGINES = {
    "single": (["engine=single"], None),
    "gpipe even": (["engine=gpipe"], None),
    "pipelining gpipe even": (["engine=pipelining", "engine.schedule=gpipe"], "gpipe"),
    "pipelining gpipe auto": (["engine=pipelining", "engine.schedule=gpipe", "engine.balance=auto"], "gpipe"),
    "pipelining 1f1b even": (["engine=pipelining", "engine.schedule=1f1b"], "1f1b"),
    "pipelining 1f1b auto": (["engine=pipelining", "engine.schedule=1f1b", "engine.balance=auto"], "1f1b"),
}
#: Cases rerun without the timeline (k=8) to measure its cost.
OVERHEAD = ("single", "pipelining gpipe auto")


def _case(name: str, k: int, args: argparse.Namespace, out: Path | None, extra: list[str]) -> dict:
    overrides, _ = ENGINES[name]
    cfg = compose_config([f"dataset={args.dataset}", f"train.epochs={args.epochs}", f"chunks={k}",
                          "microbatch.targets=all", *overrides, *extra, *args.overrides])
    folder = None if out is None else out / f"{name.replace(' ', '_')}_k{k}"
    record = run(cfg, output_dir=folder)
    if record["status"] != "completed":
        raise RuntimeError(f"{name} k={k}: {record['status']}: {record['error']}")
    p = record["pipeline"]
    rss = record["memory"].get("peak_rss_bytes_per_rank") or [record["memory"]["peak_rss_bytes"]]
    row = {"case": name, "k": k, "balance": ",".join(map(str, p["balance"])),
           "epoch_s": record["timing"]["epoch_time_median_s"],
           "peak_rss_mb_per_rank": " ".join(f"{r / 2**20:.0f}" for r in rss)}
    if "makespan_s" in p:
        row.update(makespan_s=p["makespan_s"], busy_s=p["busy_s"], ideal_speedup=p["ideal_speedup"],
                   of_ideal=p["ideal_makespan_s"] / p["makespan_s"], bubble=p["bubble"],
                   bubble_theoretical=p["bubble_theoretical"], imbalance=p["imbalance"],
                   communication_s=p["communication_s"])
    return row


def _step_overhead(engine_name: str, args: argparse.Namespace, k: int = 8) -> dict:
    """Median training-step time of one engine (k micro-batches) with the timeline recording and not,
    alternating ``args.overhead_steps`` times in this process."""
    engine_overrides = (["engine=single"] if engine_name == "single"
                        else ["engine=gpipe", "engine.devices=[cpu,cpu]", "engine.balance=[2,2]"])
    trainee = build(compose_config([f"dataset={args.dataset}", *args.overrides, f"chunks={k}",
                                    "microbatch.targets=all", *engine_overrides]))
    model, engine, ids = trainee.model, trainee.engine, trainee.training.ids
    labels, count = trainee.train_labels()
    timeline, times = engine.timeline, {True: [], False: []}
    for i in range(2 * args.overhead_steps + 2):
        on = i % 2 == 0
        engine.timeline = timeline if on else None
        start = time.perf_counter()
        engine.train_step(ids, labels, count)
        engine.step_boxes()
        if i >= 2:  # the first pair warms up
            times[on].append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"case": f"{engine_name} k={k}, {args.overhead_steps} steps in one process", "timeline_on_s": on,
            "timeline_off_s": off, "overhead": on / off - 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--chunks", type=int, nargs="+", default=list(CHUNKS))
    parser.add_argument("--cases", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--csv", type=Path, help="write the table as CSV")
    parser.add_argument("--out", type=Path, help="write each case's record and trace here (emptied first), "
                        "one folder per case: a sweep folder for experiments/report.py")
    parser.add_argument("--overhead-repeats", type=int, default=3,
                        help="timeline on/off pairs per overhead case (0: skip)")
    parser.add_argument("--overhead-steps", type=int, default=20,
                        help="in-process timeline on/off step pairs per engine (0: skip)")
    parser.add_argument("overrides", nargs="*", help="extra config overrides for every case")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.exists():
        shutil.rmtree(args.out)
    rows = []
    for k in args.chunks:
        for name in args.cases:
            if ENGINES[name][1] == "1f1b" and k < 2:
                continue
            rows.append(_case(name, k, args, args.out, []))
            print(f"{name} k={k}: {rows[-1]['epoch_s']:.3f} s", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    single = table[table.case == "single"].set_index("k").epoch_s
    table.insert(4, "speedup", table.k.map(single) / table.epoch_s)
    print(f"\npipelines on {args.dataset}, targets=all, exact METIS, {args.epochs} epochs "
          f"(median epoch after the first; speedup = single engine at the same k / this)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    overhead = []
    for name in (c for c in OVERHEAD if c in args.cases and args.overhead_repeats > 0):
        on, off = [], []
        for _ in range(args.overhead_repeats):
            on.append(_case(name, 8, args, None, [])["epoch_s"])
            off.append(_case(name, 8, args, None, ["engine.timeline=false"])["epoch_s"])
        median_on, median_off = statistics.median(on), statistics.median(off)
        overhead.append({"case": f"{name} k=8", "timeline_on_s": median_on, "timeline_off_s": median_off,
                         "overhead": median_on / median_off - 1,
                         "on_runs": " ".join(f"{t:.3f}" for t in on),
                         "off_runs": " ".join(f"{t:.3f}" for t in off)})
    for engine in ("single", "gpipe") if args.overhead_steps > 0 else ():
        overhead.append(_step_overhead(engine, args))
    if overhead:
        print(f"\ntimeline overhead (median epoch or step time with / without the timeline - 1; "
              f"{args.overhead_repeats} runs per case, or {args.overhead_steps} steps in one process)")
        print(pd.DataFrame(overhead).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
        if overhead:
            pd.DataFrame(overhead).to_csv(args.csv.with_name(f"{args.csv.stem}_overhead.csv"), index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
